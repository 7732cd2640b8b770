package redigo_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

func TestMain(m *testing.M) { os.Exit(testredis.Main(m)) }

// A context's deadline bounds the wait for the reply: a paused server answers too late, and
// the call fails with the deadline; once the server resumes the pool works again.
func TestDeadlineBoundsTheReply(t *testing.T) {
	s, err := testredis.Start(true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sw := slidingwindow.NewLimiter(redigo.Pool(s.Pool()))
	limit := slidingwindow.PerMinute(5)
	if _, err := sw.Allow(context.Background(), "rl:{a}", limit); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("CLIENT", "PAUSE", 2000, "ALL"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := sw.Allow(ctx, "rl:{a}", limit); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("want the deadline, got %v", err)
	}
	// An expired context sends nothing.
	if _, err := sw.Allow(ctx, "rl:{a}", limit); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired context: %v", err)
	}
	// Without a deadline the call waits for the pause to end. (Whether the abandoned call ran is
	// the server's business: its connection was closed while it waited.)
	r, err := sw.Allow(context.Background(), "rl:{a}", limit)
	if err != nil || !r.Allowed {
		t.Fatalf("after the pause: %+v, %v", r, err)
	}
}

func TestSplit(t *testing.T) {
	if _, _, err := redigo.Split(nil); err == nil {
		t.Fatal("no command")
	}
	if _, _, err := redigo.Split([]any{1}); err == nil {
		t.Fatal("a command name that is not a string")
	}
	name, rest, err := redigo.Split([]any{"PING", "x"})
	if name != "PING" || len(rest) != 1 || err != nil {
		t.Fatalf("%q %v %v", name, rest, err)
	}
}
