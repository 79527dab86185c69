package gateway

import (
	"fmt"
	"sync"
)

// limiter bounds the displays open at once, in all and per user. A
// display reserves its places, then checks the bounds, in one critical
// section: concurrent opens never exceed them.
type limiter struct {
	maxTotal, maxUser int // negative: no bound

	mu    sync.Mutex
	total int
	users map[string]int
}

func newLimiter(maxTotal, maxUser int) *limiter {
	return &limiter{maxTotal: maxTotal, maxUser: maxUser, users: map[string]int{}}
}

// reserve takes a place for one of the user's displays, or refuses with
// a sentence for the user; release gives it back (once, however often
// called).
func (l *limiter) reserve(user string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	l.users[user]++
	switch {
	case l.maxUser >= 0 && l.users[user] > l.maxUser:
		err = fmt.Errorf("%d displays of yours are open already, the most allowed: close one first", l.maxUser)
	case l.maxTotal >= 0 && l.total > l.maxTotal:
		err = fmt.Errorf("the gateway has its most displays open (%d): try again shortly", l.maxTotal)
	}
	if err != nil {
		l.releaseLocked(user)
		return nil, err
	}
	return sync.OnceFunc(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.releaseLocked(user)
	}), nil
}

func (l *limiter) releaseLocked(user string) {
	l.total--
	if l.users[user]--; l.users[user] <= 0 {
		delete(l.users, user)
	}
}

// count is the displays open (reserved) now.
func (l *limiter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}
