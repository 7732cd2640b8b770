// Package keys tells which arguments of a command the slidingwindow package sends are its keys,
// for the adapters that route a command by its keys (Redis Cluster, go-redis's Ring).
package keys

import (
	"fmt"
	"reflect"
	"strings"
)

// Positions is where the keys are in args (args[0] the command's name): the module's
// commands' key, or numkeys keys for ALLOWALL and PEEKALL; EVAL and EVALSHA's numkeys keys;
// none for the commands without keys; else, as redisc does, the first argument. numkeys that
// Count cannot read, or more keys than the arguments hold, give none.
func Positions(args []any) []int {
	if len(args) == 0 {
		return nil
	}
	name, _ := args[0].(string)
	from := 1
	switch strings.ToUpper(name) {
	case "COMMAND", "PING", "INFO", "CLUSTER", "CONFIG", "SCRIPT", "TIME", "SLIDINGWINDOW.TOP", "SLIDINGWINDOW.TOPRESET":
		return nil
	case "SLIDINGWINDOW.ALLOWALL", "SLIDINGWINDOW.PEEKALL":
		from = 2
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO":
		from = 3
	default:
		if len(args) < 2 {
			return nil
		}
		return []int{1}
	}
	if len(args) <= from-1 {
		return nil
	}
	n, ok := Count(args[from-1])
	if !ok || len(args) < from+n {
		return nil
	}
	at := make([]int, n)
	for i := range at {
		at[i] = from + i
	}
	return at
}

// String is a key as the server reads it.
func String(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

// Count is numkeys as the server reads it, when it is from 1 to 16: a value of any Go integer
// type, or plain decimal digits (leading zeros too).
func Count(v any) (int, bool) {
	var s string
	switch t := v.(type) {
	case int:
		return t, t >= 1 && t <= 16
	case int64:
		return int(t), t >= 1 && t <= 16
	case string:
		s = t
	case []byte:
		s = string(t)
	default:
		switch rv := reflect.ValueOf(v); rv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n := rv.Int()
			return int(n), n >= 1 && n <= 16
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n := rv.Uint()
			return int(n), n >= 1 && n <= 16
		}
	}
	if len(s) == 0 {
		return 0, false
	}
	n := 0
	for _, ch := range s {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		// Past 16 it is no numkeys: stop there rather than overflow.
		if n = n*10 + int(ch-'0'); n > 16 {
			return 0, false
		}
	}
	return n, n >= 1
}
