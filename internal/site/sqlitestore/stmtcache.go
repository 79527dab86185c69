package sqlitestore

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// stmtCache keeps statements prepared on a pool, by query. A transaction
// uses one through Tx.StmtContext, which reuses the statement database/sql
// already prepared on the transaction's connection: a query is parsed
// once per connection instead of once per transaction.
//
// A query a transaction meets first is prepared in that transaction, and
// on the pool only after it ends (prepareWanted): the write pool has one
// connection, which the transaction holds.
type stmtCache struct {
	db *sql.DB

	running sync.WaitGroup // the preparer
	hits    atomic.Int64   // statements served from the cache, for tests

	mu        sync.Mutex
	stmts     map[string]*sql.Stmt
	wanted    map[string]struct{}
	preparing bool
}

// maxStmts bounds the cache; the store's queries are a fixed set far
// smaller, so the bound only guards against a query built from data.
const maxStmts = 512

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: map[string]*sql.Stmt{}, wanted: map[string]struct{}{}}
}

// get returns the pool's statement for query, or records that a later
// preparation is wanted and returns nil.
func (c *stmtCache) get(query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.stmts[query]; st != nil {
		c.hits.Add(1)
		return st
	}
	if len(c.stmts)+len(c.wanted) < maxStmts {
		c.wanted[query] = struct{}{}
	}
	return nil
}

// prepareWanted prepares, in the background, the queries transactions
// wanted, once no transaction of the caller holds a connection. One
// preparer runs at a time; a query that fails to prepare is dropped (its
// transactions keep preparing it themselves).
func (c *stmtCache) prepareWanted() {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.preparing || len(c.wanted) == 0 {
		c.mu.Unlock()
		return
	}
	c.preparing = true
	c.mu.Unlock()
	c.running.Go(func() {
		for {
			c.mu.Lock()
			var query string
			for q := range c.wanted {
				query = q
				break
			}
			if query == "" {
				c.preparing = false
				c.mu.Unlock()
				return
			}
			delete(c.wanted, query)
			c.mu.Unlock()
			st, err := c.db.PrepareContext(context.Background(), query)
			if err != nil {
				continue // closed, or a query that needs its transaction's schema
			}
			c.mu.Lock()
			if c.stmts[query] == nil {
				c.stmts[query] = st
				st = nil
			}
			c.mu.Unlock()
			if st != nil {
				st.Close()
			}
		}
	})
}

// close waits for the preparer and closes every statement; the pool
// closes after it.
func (c *stmtCache) close() {
	c.mu.Lock()
	clear(c.wanted)
	c.mu.Unlock()
	c.running.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.stmts {
		st.Close()
		delete(c.stmts, q)
	}
	clear(c.wanted)
}
