package slidingwindow

import (
	"fmt"
	"time"
)

// Limit admits at most Max requests (weighted by cost) in any Window. Window must be a whole
// number of seconds, at least 1s.
type Limit struct {
	Window time.Duration
	Max    int64
}

// PerSecond is at most max requests in any second.
func PerSecond(max int64) Limit { return Limit{Window: time.Second, Max: max} }

// PerMinute is at most max requests in any minute.
func PerMinute(max int64) Limit { return Limit{Window: time.Minute, Max: max} }

// PerHour is at most max requests in any hour.
func PerHour(max int64) Limit { return Limit{Window: time.Hour, Max: max} }

// PerDay is at most max requests in any 24 hours.
func PerDay(max int64) Limit { return Limit{Window: 24 * time.Hour, Max: max} }

func (l Limit) String() string { return fmt.Sprintf("%d per %v", l.Max, l.Window) }

// Validate tells whether the commands can take the window (ErrWindow if not); the server
// checks Max.
func (l Limit) Validate() error {
	_, err := l.seconds()
	return err
}

// seconds is the window as the commands take it.
func (l Limit) seconds() (int64, error) {
	if l.Window < time.Second || l.Window%time.Second != 0 {
		return 0, fmt.Errorf("%w: %v", ErrWindow, l.Window)
	}
	return int64(l.Window / time.Second), nil
}

// Keyed is one key of AllowAll or PeekAll with its limits.
type Keyed struct {
	Key    string
	Limits []Limit
}
