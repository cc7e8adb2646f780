package testcluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// final marks a condition's error that ends WaitFor at once.
type final struct{ err error }

func (f final) Error() string { return f.err.Error() }
func (f final) Unwrap() error { return f.err }

// Final wraps err so that WaitFor returns it at once instead of polling on
// (a state that waiting cannot mend, such as diverged nodes).
func Final(err error) error { return final{err} }

// WaitFor calls cond every interval until it returns nil, and returns nil
// then. It returns an error naming what it waited for and cond's last error
// once timeout has passed (or parent's error once parent is done), and cond's error (unwrapped) at
// once when cond returns a Final one. cond's context ends with the wait.
func WaitFor(parent context.Context, what string, timeout, every time.Duration, cond func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		var f final
		if errors.As(err, &f) {
			return f.err
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("%s: %w (last: %v)", what, parent.Err(), err)
			}
			return fmt.Errorf("%s: not within %s: %w", what, timeout, err)
		case <-tick.C:
		}
	}
}
