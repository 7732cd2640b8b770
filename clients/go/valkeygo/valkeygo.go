// Package valkeygo runs the slidingwindow package over valkey-go: a valkey.Client on one
// server, a cluster or Sentinel.
package valkeygo

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/keys"
)

// NewLimiter is slidingwindow.NewLimiter over c.
func NewLimiter(c valkey.Client, opts ...slidingwindow.LimiterOption) *slidingwindow.Limiter {
	return slidingwindow.NewLimiter(New(c), opts...)
}

// New is a slidingwindow.Doer over c. Each command is routed by its first key (in a cluster,
// to the node of its slot; the keys of one call must share it, else the server answers
// CROSSSLOT), its arguments are sent as text (strings, bytes, integers, floats, bools as 1 or
// 0), replies come back as valkey-go's ToAny gives them (integers as int64, arrays as []any,
// text as string), an error reply comes back with the server's text (valkey-go's
// error, which takes "ERR " off, with it put back; errors.As finds the *valkey.ValkeyError), and a nil
// reply is nil. The context bounds each call as valkey-go does.
func New(c valkey.Client) slidingwindow.Doer { return doer{c} }

type doer struct{ c valkey.Client }

func (d doer) Do(ctx context.Context, args ...any) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("valkeygo: no command")
	}
	if name, ok := args[0].(string); !ok || name == "" || strings.HasSuffix(strings.ToUpper(name), "SUBSCRIBE") {
		return nil, fmt.Errorf("valkeygo: the command name is %#v, not a command this Doer sends", args[0])
	}
	words := make([]string, len(args))
	for i, a := range args {
		w, err := word(a)
		if err != nil {
			return nil, err
		}
		words[i] = w
	}
	var cmd valkey.Completed
	if at := keys.Positions(args); len(at) > 0 {
		// Routed by the first key alone: the server, not valkey-go, refuses keys of two slots.
		first := at[0]
		cmd = d.c.B().Arbitrary(words[:first]...).Keys(words[first]).Args(words[first+1:]...).Build()
	} else {
		cmd = d.c.B().Arbitrary(words...).Build()
	}
	v, err := d.c.Do(ctx, cmd).ToAny()
	if valkey.IsValkeyNil(err) {
		return nil, nil
	}
	var reply *valkey.ValkeyError
	if errors.As(err, &reply) {
		return v, replyError{text(reply.Error()), reply}
	}
	return v, err
}

// codes are the error codes other than ERR that servers answer with; valkey-go keeps them.
var codes = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`ASK BUSY BUSYGROUP BUSYKEY CLUSTERDOWN CROSSSLOT EXECABORT IOERR
		LOADING MASTERDOWN MISCONF MOVED NOAUTH NOGROUP NOPERM NOPROTO NOREPLICAS NOSCRIPT NOTBUSY
		NOTREADY OOM READONLY REDIRECT TRYAGAIN UNBLOCKED UNKILLABLE WRONGPASS WRONGTYPE`) {
		codes[c] = true
	}
}

// text is an error reply's text as the server sent it: valkey-go takes "ERR " off the replies
// that start with it, so a text whose first word is no other code gets it back.
func text(s string) string {
	code, _, _ := strings.Cut(s, " ")
	if codes[code] {
		return s
	}
	return "ERR " + s
}

// replyError is an error reply with its server's text; it unwraps to valkey-go's error.
type replyError struct {
	text string
	err  *valkey.ValkeyError
}

func (e replyError) Error() string { return e.text }
func (e replyError) Unwrap() error { return e.err }

// word is one argument as the server reads it.
func word(a any) (string, error) {
	switch v := a.(type) {
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case bool:
		if v {
			return "1", nil
		}
		return "0", nil
	}
	switch rv := reflect.ValueOf(a); rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(rv.Float(), 'g', -1, 64), nil
	case reflect.String:
		return rv.String(), nil
	}
	return "", fmt.Errorf("valkeygo: cannot send an argument of type %T", a)
}

// Masters is a Doer for each master of a cluster (its nodes whose ROLE is master, in address
// order), or the client itself: Limiter.Top asks each of them.
func (d doer) Masters(ctx context.Context) ([]slidingwindow.Doer, error) {
	if d.c.Mode() != valkey.ClientModeCluster {
		return []slidingwindow.Doer{d}, nil
	}
	nodes := d.c.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	var masters []slidingwindow.Doer
	for _, addr := range addrs {
		n := nodes[addr]
		role, err := n.Do(ctx, n.B().Role().Build()).ToAny()
		if err != nil {
			return nil, fmt.Errorf("valkeygo: ROLE of %s: %w", addr, err)
		}
		if r, ok := role.([]any); ok && len(r) > 0 && r[0] == "master" {
			masters = append(masters, doer{n})
		}
	}
	if len(masters) == 0 {
		return nil, errors.New("valkeygo: the cluster lists no master")
	}
	return masters, nil
}
