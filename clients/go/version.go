package slidingwindow

// Version is the release this package belongs to; the module is tagged clients/go/v<Version>.
// scripts/version.py holds it equal to the repository's version.
const Version = "0.1.0"
