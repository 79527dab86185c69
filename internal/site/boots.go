package site

import (
	"context"
	"time"
	"unicode/utf8"
)

// BootStep is what a target fetched from the boot server.
type BootStep string

const (
	// BootScript is the target's iPXE script: the start of a boot.
	BootScript BootStep = "script"
	// BootKernel and BootInitrd are the kernel and the initramfs of the
	// version the script named.
	BootKernel BootStep = "kernel"
	BootInitrd BootStep = "initrd"
)

// BootRecord is one answer of the boot server to a known target: which
// target fetched what, of which image and version, through which cache
// mode, from where and when. Runtime data: it moves no configuration
// version and is not exported.
type BootRecord struct {
	// ID orders the records: one recorded later has a greater ID. The
	// store sets it.
	ID     int64     `json:"id"`
	Time   time.Time `json:"time"`
	Target string    `json:"target"`
	MAC    string    `json:"mac"`
	Image  string    `json:"image"`
	// Version is the version served: the production version at that
	// moment when the target pins none.
	Version int       `json:"version"`
	Cache   CacheMode `json:"cache"`
	Step    BootStep  `json:"step"`
	// Remote is the address the request came from (host:port).
	Remote string `json:"remote"`
	// Error says why the boot server refused the step (a missing image
	// or version); empty for a step served.
	Error string `json:"error,omitempty"`
}

// The boot log keeps, per target, the last BootLogKeep records, and none
// older than BootLogMaxAge: a store forgets the others as it records new
// ones. (Three records a boot: about a hundred boots per target.)
const (
	BootLogKeep   = 300
	BootLogMaxAge = 90 * 24 * time.Hour
)

// Validate checks what a caller of BootLog.Record gives.
func (r BootRecord) Validate() error {
	switch {
	case r.Target == "" || !utf8.ValidString(r.Target) || len(r.Target) > 4*MaxNameLen:
		return Errorf(EInvalid, "boot record: target %q is empty, too long or not UTF-8", truncate(r.Target, 40))
	case r.Step != BootScript && r.Step != BootKernel && r.Step != BootInitrd:
		return Errorf(EInvalid, "boot record: step %q is not script, kernel or initrd", r.Step)
	case len(r.MAC) > 64 || len(r.Image) > MaxImageNameLen || len(r.Remote) > 300 || len(r.Error) > 1000:
		return Errorf(EInvalid, "boot record: a field is too long")
	case !utf8.ValidString(r.Error) || !utf8.ValidString(r.Remote):
		return Errorf(EInvalid, "boot record: not UTF-8")
	}
	return nil
}

// BootFilter selects boot records; zero fields match everything.
type BootFilter struct {
	Target string
	MAC    string
}

// BootLog is the record of the boots the boot server answered, kept in
// the site DB.
type BootLog interface {
	// Record appends a record (a zero Time is the time of Record),
	// forgetting what the log no longer keeps (BootLogKeep,
	// BootLogMaxAge). EInvalid for a record that fails Validate; in a
	// View, the error of a write.
	Record(ctx context.Context, r BootRecord) error
	// List returns the records that match f, newest first, after
	// opts.After (the ID, in decimal, of the last record of the previous
	// page), at most opts.Limit of them (all when 0). EInvalid when After
	// is not an ID.
	List(ctx context.Context, f BootFilter, opts ListOptions) (Page[BootRecord], error)
}
