package broker

import (
	"context"
	"fmt"
	"sync"

	"github.com/usher-vdi/usher/internal/site"
)

// userGate lets one launch of a user at a time through a broker, so that
// a second launch (a double click, a second tab) starts once the first
// has placed its session and prepared its VDA, and then goes back to that
// session instead of finding its machine counted as taken by a launch in
// flight. Launches of different users never wait for each other.
//
// It is an optimisation of one broker, not the guarantee: the site DB
// holds the guarantee for every broker of a site, as each placement
// carries the user's reconnection rule (site.Placer) and the stores
// seat one user's placements one at a time.
type userGate struct {
	mu    sync.Mutex
	users map[string]*gateEntry
}

type gateEntry struct {
	turn chan struct{} // holds a token while a launch of the user runs
	refs int           // launches running or waiting
}

// enter waits for the user's turn and returns the function that gives it
// back. When ctx ends first it returns an EUnavailable error (retry) that
// also wraps ctx's error.
func (g *userGate) enter(ctx context.Context, user string) (leave func(), err error) {
	g.mu.Lock()
	if g.users == nil {
		g.users = map[string]*gateEntry{}
	}
	e := g.users[user]
	if e == nil {
		e = &gateEntry{turn: make(chan struct{}, 1)}
		g.users[user] = e
	}
	e.refs++
	g.mu.Unlock()

	select {
	case e.turn <- struct{}{}:
		return func() {
			<-e.turn
			g.release(user, e)
		}, nil
	case <-ctx.Done():
		g.release(user, e)
		return nil, fmt.Errorf("%w: %w", site.Errorf(site.EUnavailable, "another launch of yours is still under way: retry shortly"), ctx.Err())
	}
}

func (g *userGate) release(user string, e *gateEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(g.users, user)
	}
}

// waiting returns the number of users with a launch running or waiting,
// for tests.
func (g *userGate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.users)
}
