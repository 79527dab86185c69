package site

import (
	"context"
	"time"
)

// Store is a site database. Implementations: sqlitestore (embedded default)
// and, for several brokers, a PostgreSQL store; every implementation passes
// the storetest conformance suite.
type Store interface {
	// View runs fn in a read-only transaction that sees one consistent state
	// of the site. Writes inside fn fail.
	View(ctx context.Context, fn func(Tx) error) error
	// Update runs fn in a read-write transaction. Either all of fn's changes
	// are committed or, when fn returns an error or the commit fails, none;
	// the error is fn's, or the commit's. A transaction that changes the
	// configuration moves the configuration version by exactly one; runtime
	// changes (machine status, sessions, admin accounts) do not move it.
	// Returns an EUnavailable error when the database cannot be reached.
	Update(ctx context.Context, fn func(Tx) error) error
	// Close releases the database. Transactions after Close fail.
	Close() error
	// Placer seats launches in one round trip.
	Placer
	// SessionChanger applies VDAs' session reports, many in one round trip.
	SessionChanger
	// HeartbeatRecorder records VDAs' heartbeats, many in one round trip.
	HeartbeatRecorder
}

// ConfigWatcher is a Store that tells of configuration changes as they
// commit, from any process: a broker then refreshes at once instead of at
// its next periodic check.
type ConfigWatcher interface {
	// WatchConfig calls ready once it is watching, then changed with the
	// version of each configuration change committed (from one goroutine,
	// in commit order), until ctx is done (it returns nil) or it loses
	// the database (it returns an EUnavailable error; the caller may call
	// it again). Changes committed before ready may not be told.
	WatchConfig(ctx context.Context, ready func(), changed func(version int64)) error
}

// Tx is a transaction on a Store. A Tx must not be used after the function
// it was passed to returns, nor from several goroutines at once. A View
// sees one snapshot for its whole life, whatever commits meanwhile.
//
// Collections keep the order of list fields as given. They check an
// object's own rules (Validate) and that its references exist; the rules
// between objects (one primary zone, a catalog in one delivery group, ...)
// are checked on a whole Config by ApplyConfig and Mutate, which every
// configuration change goes through. The Applications and Desktops
// collections set the Kind of what they return and refuse an object of the
// other kind with EInvalid.
type Tx interface {
	// ConfigVersion returns the configuration version as of the start of the
	// transaction (not counting this transaction's own changes). It starts
	// at 1 for a new site and only grows.
	ConfigVersion(ctx context.Context) (int64, error)
	// ConfigChanges returns what the configuration changes committed
	// after version since, up to ConfigVersion, wrote: one ConfigChange
	// per object written by each (a write of the settings or a secret
	// too), in version order. complete is false when the store's log no
	// longer reaches back to since+1 (it keeps at least the last
	// ConfigLogKeep versions, and nothing from before it existed): the
	// caller then reads the whole configuration instead.
	ConfigChanges(ctx context.Context, since int64) (changes []ConfigChange, complete bool, err error)

	// Settings returns the site settings; SetSettings replaces them.
	Settings(ctx context.Context) (Settings, error)
	SetSettings(ctx context.Context, s Settings) error
	// Directory returns the site's directory settings, bind password
	// included (a new site's are zero); SetDirectory replaces them,
	// password too (an empty one removes it), after d.Validate. The
	// password is kept among the site secrets, as
	// SecretDirectoryBindPassword; SetSecret refuses that name. A write
	// logs one KindDirectory change.
	Directory(ctx context.Context) (Directory, error)
	SetDirectory(ctx context.Context, d Directory) error

	Zones() Collection[Zone]
	Catalogs() Collection[Catalog]
	Groups() Collection[Group]
	Users() Collection[User]
	Machines() Collection[Machine]
	DeliveryGroups() Collection[DeliveryGroup]
	// Applications and Desktops share one namespace: creating an application
	// with a desktop's name is an EConflict.
	Applications() Collection[Resource]
	Desktops() Collection[Resource]
	Entitlements() Collection[Entitlement]
	// Targets are the network-boot targets. Their MACs are unique, a
	// rule between objects that ApplyConfig and Mutate check (the
	// collection does not: one plan may move a MAC from one target to
	// another).
	Targets() Collection[Target]
	// Boots is the log of the boots the boot server answered: runtime
	// data, which moves no version.
	Boots() BootLog

	// MachineStatus returns a machine's runtime state (ENotFound for an
	// unknown machine); a new machine's is Unregistered with zero load.
	// SetMachineStatus replaces it. In an Update
	// transaction, MachineStatus locks that one machine's status until the
	// transaction ends, so that a read, check and write of it is atomic
	// without locking any other machine.
	MachineStatus(ctx context.Context, machine string) (MachineStatus, error)
	SetMachineStatus(ctx context.Context, machine string, st MachineStatus) error
	// MachineStatuses returns every machine's runtime state, by machine
	// name, in one read: what a broker loads at start, and reads again to
	// learn what other brokers changed. It locks nothing.
	MachineStatuses(ctx context.Context) (map[string]MachineStatus, error)
	// MachineSessions returns the statuses of machines and the sessions
	// by ID, each by name or ID, in one round trip where the store can;
	// in an Update it locks every status (in name order) before every
	// session (in ID order), the order in which every transaction that
	// writes both must lock them, so that none deadlocks with another.
	// Unknown names and IDs are left out.
	MachineSessions(ctx context.Context, machines, sessions []string) (map[string]MachineStatus, map[string]Session, error)

	// MachineCredential returns what the site keeps of a machine's
	// credential (ENotFound for an unknown machine); a new machine's is
	// zero. SetMachineCredential replaces it. Neither moves the
	// configuration version; a machine deleted and created again starts
	// with a zero credential, so that no earlier token opens it.
	MachineCredential(ctx context.Context, machine string) (MachineCredential, error)
	SetMachineCredential(ctx context.Context, machine string, c MachineCredential) error

	Sessions() Sessions
	// History is the site's change history: who changed what, when.
	// Whoever changes the configuration or an admin account records it
	// there in the same transaction (RecordPlan); the store records
	// nothing by itself.
	History() ChangeHistory
	// Preferences are the users' own preferences in the portal: user
	// data, which moves no version and is not in the change history.
	Preferences() UserPreferences
	Admins() Collection[Admin]
	// Brokers are the brokers of the site as each last reported itself:
	// runtime state, which moves no version.
	Brokers() Collection[BrokerRecord]

	// Secret returns a site secret by name (ENotFound when it is unset):
	// what every broker of the site shares, such as the key that signs
	// tokens and the secret VDAs enrol with. SetSecret creates or replaces
	// one; it moves the configuration version, so that every broker
	// notices. Secrets are neither configuration nor exported. In an
	// Update, Secret takes the configuration lock, so that two
	// transactions creating the same secret cannot both find it unset.
	Secret(ctx context.Context, name string) ([]byte, error)
	SetSecret(ctx context.Context, name string, value []byte) error

	// AccountLock returns an account's site-wide lock-out state (see
	// ReserveLogon), the zero state with its name for an account with
	// none; in an Update it locks the account's state until the
	// transaction ends, so that a read, check and write of it is atomic.
	// SetAccountLock replaces it (a Clear state removes it). AccountLocks
	// returns every account with a state, in account order. Lock-out
	// state is runtime state: it moves no configuration version.
	AccountLock(ctx context.Context, account string) (AccountLock, error)
	SetAccountLock(ctx context.Context, l AccountLock) error
	AccountLocks(ctx context.Context) ([]AccountLock, error)
}

// Collection is one kind of named configuration object, ordered by name.
type Collection[T any] interface {
	// Get returns the named object, or ENotFound.
	Get(ctx context.Context, name string) (T, error)
	// List returns the objects named after opts.After, in name order, at
	// most opts.Limit of them (all when Limit is 0).
	List(ctx context.Context, opts ListOptions) (Page[T], error)
	// Create adds an object. EInvalid when it fails validation or refers to
	// an object that does not exist (the message names it); EConflict when
	// the name is taken.
	Create(ctx context.Context, obj T) error
	// Update replaces an existing object; ENotFound when there is none,
	// EInvalid as for Create.
	Update(ctx context.Context, obj T) error
	// Delete removes the named object; ENotFound when there is none,
	// EConflict when other objects still refer to it, or for a machine
	// with live sessions (the message counts them).
	Delete(ctx context.Context, name string) error
}

// ListOptions select a page of a list.
type ListOptions struct {
	// After is the name (or ID) of the last item of the previous page.
	After string
	// Limit is the most items to return; 0 means no limit.
	Limit int
}

// Page is one page of a list.
type Page[T any] struct {
	Items []T
	// Total counts every item of the list, on every page.
	Total int
	// Next is the After of the next page, "" on the last page.
	Next string
}

// Sessions are the user sessions of a site. Sessions name their user,
// resource and machine without holding on to them: a session outlives the
// deletion of its machine, for history.
type Sessions interface {
	// Get returns the session with the ID, or ENotFound.
	Get(ctx context.Context, id string) (Session, error)
	// List returns sessions matching f, ordered by ID.
	List(ctx context.Context, f SessionFilter, opts ListOptions) (Page[Session], error)
	// Create adds a session. EConflict when the ID is taken, EInvalid when
	// the user, resource or machine does not exist.
	Create(ctx context.Context, s Session) error
	// Update replaces an existing session; ENotFound when there is none.
	Update(ctx context.Context, s Session) error
	// Delete removes a session; ENotFound when there is none.
	Delete(ctx context.Context, id string) error
}

// SessionFilter selects sessions; zero fields match everything.
type SessionFilter struct {
	User    string
	Machine string
	State   SessionState
	// Group selects the sessions of the users who are members of this
	// group now (a session keeps no record of its user's groups).
	Group string
	// Live selects only sessions that have not ended (not logged off), so
	// that brokering does not read a user's or a machine's history.
	Live bool
}

// BrokerRecord is one broker of a site: where it serves and when it last
// said it was alive. Brokers record themselves at start and every few
// seconds; a name is one broker's at a time.
type BrokerRecord struct {
	Name string `json:"name"`
	Zone string `json:"zone"`
	// Address is the broker's HTTP listener, host:port.
	Address string `json:"address"`
	// Instance tells one run of a broker from another under the same
	// name: a restarted broker has a new one.
	Instance  string    `json:"instance"`
	StartedAt time.Time `json:"started_at,omitzero"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
}

// Validate checks the record's own fields.
func (b BrokerRecord) Validate() error {
	if err := ValidateName(KindBroker, b.Name); err != nil {
		return err
	}
	if b.Instance == "" {
		return invalid(KindBroker, b.Name, "instance is missing")
	}
	return nil
}

// Admin is an administrator account of the admin API. Admins are not part
// of the site configuration: they are neither exported nor applied.
type Admin struct {
	Name         string    `json:"name"`
	PasswordHash string    `json:"-"`
	CreatedAt    time.Time `json:"created_at"`
}

// Validate checks the admin account's own fields.
func (a Admin) Validate() error {
	if err := ValidateAccountName(KindAdmin, a.Name); err != nil {
		return err
	}
	if a.PasswordHash == "" || a.PasswordHash[0] != '$' {
		return invalid(KindAdmin, a.Name, "password hash is missing")
	}
	return nil
}

// TxWrapper is implemented by a Tx that wraps another to watch or change
// some of its methods (the Local Host Cache's recording of what a
// transaction wrote, say) and adds no optional interface of its own.
// Unwrap returns the wrapped Tx, and TxAs looks through it for the
// optional interfaces (BulkWriter, CredentialLister, SessionUpserter,
// LocalCopy) that the wrapper does not implement itself, so that a
// wrapper keeps every capability of its Tx without forwarding each one by
// hand, and claims none the Tx lacks.
//
// A wrapper that must refuse or see what an optional interface does
// implements that interface itself, which stops TxAs there; one that
// refuses writes wholesale (a Tx of the local copy in outage mode) does
// not implement TxWrapper at all.
type TxWrapper interface {
	Tx
	Unwrap() Tx
}

// TxAs returns the first Tx in tx's chain (tx, then what each TxWrapper's
// Unwrap returns) that implements T, as errors.As does for errors. It is
// how callers ask a Tx for an optional interface; a plain type assertion
// would miss one under a wrapper.
func TxAs[T any](tx Tx) (T, bool) {
	for tx != nil {
		if t, ok := tx.(T); ok {
			return t, true
		}
		w, ok := tx.(TxWrapper)
		if !ok {
			break
		}
		tx = w.Unwrap()
	}
	var zero T
	return zero, false
}

// BulkWriter is a Tx that can pipeline the writes of a large change: from
// WriteInBulk on, its Creates may go to the database with later
// statements (thousands to a round trip), their errors returned by a
// later call or by the commit instead of by Create. ApplyConfig asks for
// it once the whole configuration has been validated against the site's,
// under the configuration lock, so that such errors can only come from
// the database itself.
type BulkWriter interface {
	WriteInBulk()
}

// OnceReader is a Store that can run reads outside a transaction: each
// round trip to the database sees what committed before it, with no
// snapshot across them, and costs no BEGIN nor ROLLBACK. For a read of one
// round trip that needs no more (a credential check), it is View without
// the transaction's cost.
type OnceReader interface {
	ReadOnce(ctx context.Context, fn func(Tx) error) error
}

// ReadOnce runs fn with s's ReadOnce when it has one, else in a View.
func ReadOnce(ctx context.Context, s Store, fn func(Tx) error) error {
	if r, ok := s.(OnceReader); ok {
		return r.ReadOnce(ctx, fn)
	}
	return s.View(ctx, fn)
}

// CredentialLister is a Tx that reads every machine's credential in one
// read: what a broker copies into its local copy of the site (the Local
// Host Cache), so that VDAs can authenticate while the site DB is down.
type CredentialLister interface {
	MachineCredentials(ctx context.Context) (map[string]MachineCredential, error)
}

// SessionUpserter is a Tx that writes many sessions by ID in one go: each
// is created when the store lacks it, else replaced, except that a session
// the store holds as ended stays ended (an end is never undone). A new
// session whose user, resource or machine does not exist is not written:
// its ID is returned among refused, and the others are written. It is how
// a broker writes an outage's sessions back to the site DB (the Local Host
// Cache) in a round trip per batch instead of two per session.
type SessionUpserter interface {
	UpsertSessions(ctx context.Context, sessions []Session) (refused []string, err error)
}

// LocalCopy is a Tx of a broker's local copy of the site (the Local Host
// Cache), kept in an embedded database.
//
// SetConfigVersion makes the copy's configuration version the site DB's
// version it was copied at (a copy is made with ApplyConfig, which moves
// the version its own way); it moves nothing else. The session journal
// records, in the transaction that wrote them, the IDs of the sessions
// written while the site DB was down, so that they are written back when
// it returns, even after a restart: JournalSessions adds IDs (an ID
// already there stays once), Journaled lists them in ID order, and
// Unjournal removes the IDs that were written back.
type LocalCopy interface {
	SetConfigVersion(ctx context.Context, version int64) error
	JournalSessions(ctx context.Context, ids []string) error
	Journaled(ctx context.Context) ([]string, error)
	Unjournal(ctx context.Context, ids []string) error
}
