package keys

import (
	"reflect"
	"testing"
)

// Where the keys of the commands the package sends are, and what is not read as keys.
func TestPositions(t *testing.T) {
	for _, c := range []struct {
		args []any
		want []int
	}{
		{[]any{"SLIDINGWINDOW.ALLOW", "k", 1, 1, "*"}, []int{1}},
		{[]any{"DEL", []byte("k")}, []int{1}},
		{[]any{"SLIDINGWINDOW.ALLOWALL", 2, "a", "b", "*"}, []int{2, 3}},
		{[]any{"slidingwindow.peekall", "02", "a", "b", "*"}, []int{2, 3}},
		{[]any{"EVALSHA", "sha", int8(2), "a", "b", "allow"}, []int{3, 4}},
		{[]any{"EVAL", "script", "0", "allowall"}, nil},
		// numkeys the server would refuse, or more keys than arguments: none.
		{[]any{"SLIDINGWINDOW.ALLOWALL", "x", "a"}, nil},
		{[]any{"SLIDINGWINDOW.ALLOWALL", 3, "a", "b"}, nil},
		{[]any{"SLIDINGWINDOW.ALLOWALL", 17}, nil},
		{[]any{"COMMAND", "INFO", "slidingwindow.allow"}, nil},
		{[]any{"SLIDINGWINDOW.TOP", "COUNT", 10}, nil},
		{[]any{"PING"}, nil},
		{nil, nil},
	} {
		if got := Positions(c.args); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v: %v, want %v", c.args, got, c.want)
		}
	}
}
