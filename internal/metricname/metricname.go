// Package metricname holds the names of the Prometheus metrics that usher
// both registers and reads: the package that registers a metric names it
// with a constant here, and whatever reads it back (the console's
// dashboard in internal/api, the benches' scrapers) uses the same
// constant, so that a renamed metric cannot leave a reader counting
// nothing. Metrics that nothing of usher's reads keep their names where
// they are registered.
//
// Any package may import it; it imports nothing. It holds names only: the
// console's JavaScript gets figures from the API, never metric names.
package metricname

// The broker's metrics (internal/broker/brokerprom), which the dashboard
// and the site benches read.
const (
	// BrokerTransactions counts brokering transactions by Operation and
	// Result (a counter).
	BrokerTransactions = "usher_broker_transactions_total"
	// BrokerTransactionDuration is their duration in seconds, by
	// Operation (a histogram).
	BrokerTransactionDuration = "usher_broker_transaction_duration_seconds"
	// BrokerReconnections counts launches that returned a user to an
	// existing session (a counter).
	BrokerReconnections = "usher_broker_reconnections_total"
	// BrokerTimerLogoffs counts sessions logged off by their delivery
	// group's session timer, by timer (a counter).
	BrokerTimerLogoffs = "usher_broker_timer_logoffs_total"
	// BrokerRefusedTransactions counts transactions refused at the
	// concurrency bound (a counter).
	BrokerRefusedTransactions = "usher_broker_refused_transactions_total"
	// Machines counts machines by State and Zone (a gauge).
	Machines = "usher_machines"
	// Sessions counts live sessions by State and Zone (a gauge).
	Sessions = "usher_sessions"
)

// The Local Host Cache's metric (internal/server), which the dashboard
// reads.
const (
	// LHCOutage is 1 while the broker brokers from its local copy (a
	// gauge).
	LHCOutage = "usher_lhc_outage"
)

// The directory's metrics (internal/auth/ldapauth/ldapprom), which the
// directory bench reads.
const (
	// DirectoryOperations counts directory operations by Op and Result
	// (a counter).
	DirectoryOperations = "usher_directory_operations_total"
	// DirectoryOperationDuration is their duration in seconds, by Op (a
	// histogram).
	DirectoryOperationDuration = "usher_directory_operation_duration_seconds"
)

// The block meter's metrics (internal/block/meter), which the block and
// boot benches read.
const (
	// BlockOps counts block operations by Layer and Op (a counter).
	BlockOps = "usher_block_ops_total"
	// BlockBytes counts block bytes by Layer and Op (a counter).
	BlockBytes = "usher_block_bytes_total"
)

// Label names that readers select by.
const (
	Operation = "operation"
	Result    = "result"
	State     = "state"
	Zone      = "zone"
	Op        = "op"
	Layer     = "layer"
)
