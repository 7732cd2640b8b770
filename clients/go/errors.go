package slidingwindow

import "errors"

// Errors the package itself returns (wrapped with the value at fault; test with errors.Is). An
// error reply from Redis is returned as the Doer gave it, with the server's text.
var (
	// ErrWindow: a limit's window is not a whole number of seconds, or shorter than 1s (the
	// commands take windows in seconds).
	ErrWindow = errors.New("slidingwindow: a limit's window must be a whole number of seconds, at least 1s")
	// ErrNoLimits: a call, or a key of AllowAll, without a limit.
	ErrNoLimits = errors.New("slidingwindow: at least one limit is needed")
	// ErrNoKeys: AllowAll or PeekAll without a key.
	ErrNoKeys = errors.New("slidingwindow: at least one key is needed")
	// ErrLease: a lease (the Lease option, a Leaser's LeaseConfig) the commands cannot take.
	ErrLease = errors.New("slidingwindow: invalid lease")
	// ErrPrecision: a Precision the commands cannot take (not a whole number of ms, under 1ms, or
	// rounding now + lease up past 2^53 ms).
	ErrPrecision = errors.New("slidingwindow: invalid precision")
	// ErrLateness: WithLateness outside 0 to 24h, or not a whole number of ms.
	ErrLateness = errors.New("slidingwindow: the lateness must be a whole number of ms from 0 to 24h")
	// ErrClosed: a Leaser used after Close.
	ErrClosed = errors.New("slidingwindow: the Leaser is closed")
	// ErrReply: the server answered something other than the contract's reply.
	ErrReply = errors.New("slidingwindow: unexpected reply")
	// ErrSettled: a Reservation settled or cancelled twice, or one that was refused.
	ErrSettled = errors.New("slidingwindow: the reservation was refused, or is already settled or cancelled")
	// ErrNeedsModule: a call only the module answers (Top) on the script path, which keeps no
	// summary of refusals.
	ErrNeedsModule = errors.New("slidingwindow: this call needs the module: the Lua script keeps no summary of refusals")
)
