package slidingwindow_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

// readmeBlock is the README's first ```fence block that starts with first, the checkout's path
// in place of /path/to/slidingwindow.
func readmeBlock(t *testing.T, fence, first string) string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(string(readme), "```"+fence+"\n")[1:] {
		body := part[:strings.Index(part, "```")]
		if strings.HasPrefix(body, first) {
			return strings.ReplaceAll(body, "/path/to/slidingwindow", root)
		}
	}
	t.Fatalf("README.md has no ```%s block starting %q", fence, first)
	return ""
}

// The README's "Install" and its first program, as a user follows them: a program outside this
// module, its go.mod and main.go taken from the README's blocks (the checkout's path for
// /path/to/slidingwindow), `go mod tidy` and `go build` (modules from the module cache, and from
// the Go module proxy for what this module's own build did not fetch: tidy also reads the
// go.mod files of the dependencies' tests); then the program, on a server with the module and on one
// without it (its address in place of localhost:6379), prints what the README shows and leaves
// the three admitted requests logged under the seed's key.
func TestTheReadmeProgram(t *testing.T) {
	dir := t.TempDir()
	gomod := readmeBlock(t, "text", "module example.com/app")
	program := readmeBlock(t, "go", "package main")
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", gomod)
	write("main.go", program)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", "app", "."}, {"version", "-m", "app"}} {
		cmd := exec.Command(goTool, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s\ngo.mod:\n%s", strings.Join(args, " "), err, out, gomod)
		}
		if args[0] == "version" && !strings.Contains(string(out), "github.com/redis/go-redis/v9") {
			t.Fatalf("the program does not link go-redis:\n%s", out)
		}
	}
	want := readmeBlock(t, "text", "true 1")
	for _, module := range []bool{true, false} {
		s, err := testredis.Start(module)
		if err != nil {
			t.Fatal(err)
		}
		write("main.go", strings.Replace(program, `"localhost:6379"`, `"`+s.Addr()+`"`, 1))
		build := exec.Command(goTool, "build", "-o", "app", ".")
		build.Dir, build.Env = dir, env
		if out, err := build.CombinedOutput(); err != nil {
			s.Close()
			t.Fatalf("go build: %v\n%s", err, out)
		}
		out, err := exec.Command(filepath.Join(dir, "app")).CombinedOutput()
		logged, zerr := s.Int64("ZCARD", "rate:sliding:42")
		s.Close()
		if err != nil || string(out) != want {
			t.Fatalf("module %v: %v\n%s\nwant:\n%s", module, err, out, want)
		}
		if zerr != nil || logged != 3 {
			t.Fatalf("module %v: %d logged (%v)", module, logged, zerr)
		}
	}
}
