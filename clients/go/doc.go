// Package slidingwindow rate-limits with exact sliding windows kept in Redis: the
// SLIDINGWINDOW.ALLOW / PEEK / ALLOWALL / PEEKALL / REFUND commands of the slidingwindow module
// where it is loaded, and the same contract as a Lua script (EVALSHA) where it is not, with
// identical replies and keys.
//
// The package needs only the standard library: it talks to Redis through a Doer, one method
// that sends a command and returns its reply. The goredis subpackage adapts go-redis v9's
// clients (goredis.NewLimiter(rdb)), valkeygo valkey-go's, redigo a redigo pool, and
// redigo/cluster a redisc cluster; any other client fits in a DoFunc.
//
// Every call passes "*" as the request's time by default, so that the server's clock decides:
// callers that stamp their own clock can be over-admitted when their calls arrive out of order
// (see Now for the rules that make one's own clock exact).
//
// A Leaser takes a hot key's permits in bulk (the LEASE option) and hands them out from memory,
// never admitting more than a limit's max in any window, on any number of nodes.
package slidingwindow
