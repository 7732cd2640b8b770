package slidingwindow_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The README's "Install", as a user without a module proxy follows it: a program outside this
// module, its go.mod and main.go taken from the README's blocks (the checkout's path for
// /path/to/slidingwindow, the offline replace lines added), an empty module cache, GOPROXY=off;
// `go mod tidy` then `go build` succeed and the program links the package.
func TestTheReadmeInstallBuildsOffline(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "clients/go/third_party/redisc/go.mod")); err != nil {
		t.Fatalf("no offline modules (make go-vendor makes them): %v", err)
	}
	block := func(fence, first string) string {
		for _, part := range strings.Split(string(readme), "```"+fence+"\n")[1:] {
			body := part[:strings.Index(part, "```")]
			if strings.HasPrefix(body, first) {
				return strings.ReplaceAll(body, "/path/to/slidingwindow", root)
			}
		}
		t.Fatalf("README.md has no ```%s block starting %q", fence, first)
		return ""
	}
	dir := t.TempDir()
	gomod := block("text", "module example.com/app") + "\n" + block("text", "replace (")
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", gomod)
	write("main.go", block("go", "package main"))
	env := append(os.Environ(),
		"GOPROXY=off", "GOWORK=off", "GOFLAGS=-modcacherw",
		"GOMODCACHE="+filepath.Join(dir, "modcache"), "GOPATH="+filepath.Join(dir, "gopath"))
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", "app", "."}, {"version", "-m", "app"}} {
		cmd := exec.Command(goTool, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s\ngo.mod:\n%s", strings.Join(args, " "), err, out, gomod)
		}
		if args[0] == "version" && !strings.Contains(string(out), "github.com/slidingwindow/slidingwindow/clients/go") {
			t.Fatalf("the program does not link the package:\n%s", out)
		}
	}
}
