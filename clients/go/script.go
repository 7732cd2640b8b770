package slidingwindow

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	_ "embed" // the script
	"encoding/hex"
	"strings"
)

// Script is clients/lua/slidingwindow.lua, the contract as a Lua script for servers without the
// module. The file lives in this package (go:embed does not follow links); clients/lua and the
// Python and Node packages link to it.
//
//go:embed slidingwindow.lua
var Script string

var scriptSHA = func() string {
	sum := sha1.Sum([]byte(Script))
	return hex.EncodeToString(sum[:])
}()

// crockford is the ULID alphabet.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// entropy is the script's ARGV[2]: 16 random Crockford characters, the random part of the first
// member a call adds (scripts have no good randomness of their own).
func entropy() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	for i, v := range b {
		b[i] = crockford[v&31]
	}
	return string(b[:]), nil
}

// eval runs the script: EVALSHA, then EVAL when the server does not hold it (NOSCRIPT).
func eval(ctx context.Context, rdb Doer, command string, keys, rest []any) (any, error) {
	random, err := entropy()
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 5+len(keys)+len(rest))
	args = append(args, "EVALSHA", scriptSHA, len(keys))
	args = append(args, keys...)
	args = append(args, command, random)
	args = append(args, rest...)
	reply, err := rdb.Do(ctx, args...)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		args[0], args[1] = "EVAL", Script
		return rdb.Do(ctx, args...)
	}
	return reply, err
}
