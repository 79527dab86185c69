package vda

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/usher-vdi/usher/internal/atomicfile"
)

// stateFile is what a machine keeps across agent restarts: its sessions,
// the newest unspent ticket of each (only its hash, as ever), and its
// machine credential. The file is written 0600: the credential lets
// whoever reads it register as the machine until it expires or an admin
// revokes it.
type stateFile struct {
	Machine           string         `json:"machine"`
	Sessions          []savedSession `json:"sessions"`
	Credential        string         `json:"credential,omitempty"`
	CredentialExpires time.Time      `json:"credential_expires,omitzero"`
}

type savedSession struct {
	ID            string       `json:"id"`
	User          string       `json:"user"`
	Resource      string       `json:"resource"`
	CommandLine   string       `json:"command_line,omitempty"`
	State         SessionState `json:"state"`
	ClientName    string       `json:"client_name,omitempty"`
	Since         time.Time    `json:"since"`
	TicketHash    string       `json:"ticket_hash,omitempty"`
	TicketExpires time.Time    `json:"ticket_expires,omitzero"`
}

// load reads the state file; a missing file is an empty machine.
func (m *Machine) load() error {
	raw, err := os.ReadFile(m.cfg.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("read state %s: %w", m.cfg.StateFile, err)
	}
	if st.Machine != m.cfg.Name {
		return fmt.Errorf("state file %s is machine %q's", m.cfg.StateFile, st.Machine)
	}
	m.cred = Credential{Token: st.Credential, ExpiresAt: st.CredentialExpires}
	for _, s := range st.Sessions {
		switch s.State {
		case StatePending, StateActive, StateDisconnected:
		default:
			return fmt.Errorf("state file %s: session %q is %q", m.cfg.StateFile, s.ID, s.State)
		}
		m.sessions[s.ID] = &session{Session: Session{ID: s.ID, User: s.User, Resource: s.Resource, CommandLine: s.CommandLine,
			State: s.State, ClientName: s.ClientName, Since: s.Since}, ticket: s.TicketHash}
		if s.TicketHash != "" {
			m.tickets[s.TicketHash] = &ticket{session: s.ID, expires: s.TicketExpires}
		}
	}
	return nil
}

// save writes the sessions and credential as they are now to the state file, if there is
// one. Each write takes the state at the time it runs, so the last one
// written is the newest.
func (m *Machine) save() {
	if m.cfg.StateFile == "" {
		return
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	st := stateFile{Machine: m.cfg.Name, Sessions: []savedSession{}}
	m.mu.Lock()
	st.Credential, st.CredentialExpires = m.cred.Token, m.cred.ExpiresAt
	for _, s := range m.sessions {
		ss := savedSession{ID: s.ID, User: s.User, Resource: s.Resource, CommandLine: s.CommandLine,
			State: s.State, ClientName: s.ClientName, Since: s.Since}
		if t := m.tickets[s.ticket]; t != nil && !t.used && !t.superseded {
			ss.TicketHash, ss.TicketExpires = s.ticket, t.expires
		}
		st.Sessions = append(st.Sessions, ss)
	}
	m.mu.Unlock()
	if err := saveJSON(m.cfg.StateFile, st); err != nil {
		m.log.Error("save sessions", keyErr, err)
	}
}

// saveJSON replaces path with v in JSON (atomicfile).
func saveJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(raw, '\n'), 0o600)
}
