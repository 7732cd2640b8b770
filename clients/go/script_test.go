package slidingwindow_test

import (
	"bytes"
	"os"
	"testing"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// The embedded copy must be the shared script, byte for byte: go:embed does not follow links.
func TestScriptIsTheSharedOne(t *testing.T) {
	shared, err := os.ReadFile("../lua/slidingwindow.lua")
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile("slidingwindow.lua")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shared, local) || slidingwindow.Script != string(shared) {
		t.Fatal("clients/go/slidingwindow.lua differs from clients/lua/slidingwindow.lua: " +
			"refresh it with `cp clients/lua/slidingwindow.lua clients/go/` from the repository root")
	}
}
