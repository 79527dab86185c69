// Package xvnc runs the displays of a Linux session host: one TigerVNC
// Xvnc per session, an X server that is its own VNC server, listening
// only on a 0600 Unix socket in a directory of the session's own, with
// the session's desktop or published application running on it as the
// session's Unix account.
//
// A [Starter] starts displays ([Starter.Start]); a [Display] is one of
// them: [Display.Dial] reaches its RFB stream, [Display.Done] tells when
// its Xvnc stopped, and [Display.Stop] ends it. Readiness is an event, not
// a wait: Xvnc picks a free display number itself and writes it on a
// pipe (-displayfd) once it accepts connections.
//
// cmd/usher (usher vda --display xvnc), internal/server (the demo's
// desktop host) and tests import it; a Starter is a vda.DisplayStarter
// ([Starter.StartDisplay]), and the agent (internal/vda) reaches it
// through that interface and does not import it.
package xvnc

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults.
const (
	// DefaultGeometry is the display's size when Config.Geometry is empty.
	DefaultGeometry = "1280x800"
	// DefaultFrameRate is the most updates a second Xvnc sends a client.
	DefaultFrameRate = 30
	// DefaultStartTimeout bounds the start of Xvnc, up to its readiness.
	DefaultStartTimeout = 15 * time.Second
	// DefaultStopTimeout is how long Stop waits after SIGTERM before it
	// sends SIGKILL.
	DefaultStopTimeout = 5 * time.Second
	// DefaultProgram is the Xvnc looked up in $PATH.
	DefaultProgram = "Xvnc"
)

// Errors callers branch on.
var (
	// ErrNotInstalled: there is no Xvnc to run.
	ErrNotInstalled = errors.New("no Xvnc found: install tigervnc-standalone-server")
	// ErrNoCapacity: the host runs its Config.MaxDisplays displays.
	ErrNoCapacity = errors.New("every display of the host is in use")
	// ErrStopped: the display stopped; it cannot be dialled.
	ErrStopped = errors.New("the display stopped")
)

// Config configures a Starter.
type Config struct {
	// Program is the Xvnc to run, a path or a name looked up in $PATH;
	// "" means DefaultProgram.
	Program string
	// Dir is where the sessions' directories go (each 0700, owned by the
	// session's account, holding the RFB socket and the X authority
	// file); "" means the system's temporary directory. Unix socket paths
	// are short: keep it under about 60 bytes.
	Dir string
	// Geometry is the display's size, WxH; "" means DefaultGeometry. A
	// client may resize it (-AcceptSetDesktopSize).
	Geometry string
	// FrameRate caps the updates a second; 0 means DefaultFrameRate.
	FrameRate int
	// DesktopCommand is run, by /bin/sh -c, on the display of a session
	// that has no command line of its own (a published desktop); "" runs
	// nothing there.
	DesktopCommand string
	// Account, when set, is the Unix account every session runs as (for
	// hosts without directory accounts, and demos that run sessions as
	// their own account). "" runs each session as the account named
	// after its user (AccountName).
	Account string
	// MaxDisplays bounds the displays running at once; 0 means no bound.
	MaxDisplays int
	// StartTimeout bounds a start; 0 means DefaultStartTimeout.
	// StopTimeout is the wait between SIGTERM and SIGKILL; 0 means
	// DefaultStopTimeout.
	StartTimeout, StopTimeout time.Duration
	Logger                    *slog.Logger
}

// Session is what a display is started for.
type Session struct {
	ID string
	// User is the session's user, DOMAIN\name, name@domain or name.
	User string
	// Resource names the desktop (Xvnc's desktop name, which viewers
	// show).
	Resource string
	// CommandLine is the published application to run, by /bin/sh -c;
	// "" runs Config.DesktopCommand.
	CommandLine string
}

// Starter starts displays. It is safe for concurrent use.
type Starter struct {
	cfg           Config
	program       string
	width, height int
	log           *slog.Logger
	root          bool
	self          *account // the agent's own account
	fixed         *account // Config.Account, looked up

	mu      sync.Mutex
	running int
}

// account is a Unix account sessions run as.
type account struct {
	name, home, shell string
	uid, gid          uint32
	groups            []uint32
}

var geometryRE = regexp.MustCompile(`^([0-9]{1,5})x([0-9]{1,5})$`)

// New returns a Starter. It fails when Xvnc is not installed
// (ErrNotInstalled), when the configuration is wrong, and when
// Config.Account is not an account this process can run sessions as.
func New(cfg Config) (*Starter, error) {
	prog := cmp.Or(cfg.Program, DefaultProgram)
	path, err := exec.LookPath(prog)
	if err != nil {
		return nil, fmt.Errorf("%w (looked for %s)", ErrNotInstalled, prog)
	}
	geom := cmp.Or(cfg.Geometry, DefaultGeometry)
	g := geometryRE.FindStringSubmatch(geom)
	if g == nil {
		return nil, fmt.Errorf("display geometry %q is not WxH, e.g. %s", geom, DefaultGeometry)
	}
	w, _ := strconv.Atoi(g[1])
	h, _ := strconv.Atoi(g[2])
	if w < 16 || h < 16 || w > 16384 || h > 16384 {
		return nil, fmt.Errorf("display geometry %q: each side must be 16 to 16384 pixels", geom)
	}
	switch {
	case cfg.FrameRate < 0:
		return nil, errors.New("negative display frame rate")
	case cfg.MaxDisplays < 0:
		return nil, errors.New("negative MaxDisplays")
	}
	cfg.FrameRate = cmp.Or(cfg.FrameRate, DefaultFrameRate)
	cfg.StartTimeout = cmp.Or(max(cfg.StartTimeout, 0), DefaultStartTimeout)
	cfg.StopTimeout = cmp.Or(max(cfg.StopTimeout, 0), DefaultStopTimeout)
	if cfg.Dir == "" {
		cfg.Dir = os.TempDir()
	}
	if fi, err := os.Stat(cfg.Dir); err != nil {
		return nil, fmt.Errorf("display directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("display directory %s is not a directory", cfg.Dir)
	}
	st := &Starter{cfg: cfg, program: path, width: w, height: h, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		root: os.Geteuid() == 0}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("the agent's own account: %w", err)
	}
	if st.self, err = lookupAccount(u.Username); err != nil {
		return nil, fmt.Errorf("the agent's own account: %w", err)
	}
	if cfg.Account != "" {
		if st.fixed, err = st.account(cfg.Account, true); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// AccountName returns the Unix account of a session's user: the name
// without its domain (DOMAIN\name and name@domain are name), in lower
// case.
func AccountName(user string) string {
	if i := strings.LastIndexByte(user, '\\'); i >= 0 {
		user = user[i+1:]
	}
	if i := strings.IndexByte(user, '@'); i >= 0 {
		user = user[:i]
	}
	return strings.ToLower(user)
}

var accountRE = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}$`)

// account looks up the account a session may run as. fixed is
// Config.Account, which may be root; an account mapped from a user name
// may not.
func (st *Starter) account(name string, fixed bool) (*account, error) {
	if !accountRE.MatchString(name) {
		return nil, fmt.Errorf("session account %q is not a Unix account name", name)
	}
	a, err := lookupAccount(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		return nil, fmt.Errorf("session account %q does not exist on this host", name)
	}
	if err != nil {
		return nil, fmt.Errorf("session account %q: %w", name, err)
	}
	switch {
	case a.uid == 0 && !fixed:
		return nil, fmt.Errorf("session account %q is root's: a session never runs as root unless the display account is set to it", name)
	case !st.root && a.uid != st.self.uid:
		return nil, fmt.Errorf("session account %q: the agent runs as %q, not as root, and can start displays only for its own account", name, st.self.name)
	}
	return a, nil
}

func lookupAccount(name string) (*account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("account %q has uid %q and gid %q, not numbers", name, u.Uid, u.Gid)
	}
	a := &account{name: u.Username, home: u.HomeDir, shell: loginShell(u.Username), uid: uint32(uid), gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				a.groups = append(a.groups, uint32(g))
			}
		}
	}
	return a, nil
}

// loginShell returns the account's shell from /etc/passwd (os/user does
// not tell it), or /bin/sh.
func loginShell(name string) string {
	raw, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return "/bin/sh"
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == name && f[6] != "" {
			return f[6]
		}
	}
	return "/bin/sh"
}

// Running returns the number of displays started and not yet stopped.
func (st *Starter) Running() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.running
}

// Display is one session's running display.
type Display struct {
	st      *Starter
	session string
	acct    *account
	dir     string
	socket  string
	xauth   string
	number  int
	xvnc    *exec.Cmd
	xvncOut *tail
	done    chan struct{} // closed when Xvnc exited
	cmd     *exec.Cmd     // the session's command, if any
	cmdDone chan struct{} // closed when it exited (at once without one)

	mu       sync.Mutex
	stopping bool
	err      error

	stopOnce sync.Once
	stopped  chan struct{}
	stopErr  error
}

// Start starts s's display: Xvnc as s's account, then the session's
// command line (or Config.DesktopCommand) on it. It returns once Xvnc
// accepts connections, or fails: ErrNoCapacity at Config.MaxDisplays, an
// error naming the account when s cannot run as one, and Xvnc's last
// words when it does not start. ctx bounds the start only.
func (st *Starter) Start(ctx context.Context, s Session) (*Display, error) {
	acct := st.fixed
	if acct == nil {
		var err error
		if acct, err = st.account(AccountName(s.User), false); err != nil {
			return nil, err
		}
	}
	st.mu.Lock()
	if st.cfg.MaxDisplays > 0 && st.running >= st.cfg.MaxDisplays {
		st.mu.Unlock()
		return nil, fmt.Errorf("%w (%d)", ErrNoCapacity, st.cfg.MaxDisplays)
	}
	st.running++
	st.mu.Unlock()
	d, err := st.start(ctx, s, acct)
	if err != nil {
		st.release()
		return nil, fmt.Errorf("start the display of session %s: %w", s.ID, err)
	}
	st.log.DebugContext(ctx, "display started", "session", s.ID, "display", d.Name(), "account", acct.name)
	return d, nil
}

func (st *Starter) release() {
	st.mu.Lock()
	st.running--
	st.mu.Unlock()
}

func (st *Starter) start(ctx context.Context, s Session, acct *account) (_ *Display, err error) {
	ctx, cancel := context.WithTimeout(ctx, st.cfg.StartTimeout)
	defer cancel()
	d := &Display{st: st, session: s.ID, acct: acct, done: make(chan struct{}), cmdDone: make(chan struct{}), stopped: make(chan struct{})}
	if d.dir, err = os.MkdirTemp(st.cfg.Dir, "usher-display-"); err != nil {
		return nil, fmt.Errorf("session directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(d.dir)
		}
	}()
	d.socket, d.xauth = filepath.Join(d.dir, "rfb.sock"), filepath.Join(d.dir, "Xauthority")
	if len(d.socket) > 107 {
		return nil, fmt.Errorf("socket path %s is longer than a Unix socket's 107 bytes: use a shorter display directory", d.socket)
	}
	if err := writeXauthority(d.xauth); err != nil {
		return nil, err
	}
	if st.root {
		if err := ensureX11Dir(); err != nil {
			return nil, err
		}
		for _, p := range []string{d.dir, d.xauth} {
			if err := os.Chown(p, int(acct.uid), int(acct.gid)); err != nil {
				return nil, fmt.Errorf("session directory: %w", err)
			}
		}
	}

	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("displayfd pipe: %w", err)
	}
	defer r.Close()
	desktop := cmp.Or(s.Resource, "usher")
	d.xvnc = exec.Command(st.program,
		"-displayfd", "3",
		"-rfbunixpath", d.socket, "-rfbunixmode", "0600", "-rfbport", "-1",
		"-SecurityTypes", "None",
		"-auth", d.xauth, "-nolisten", "tcp",
		"-geometry", fmt.Sprintf("%dx%d", st.width, st.height), "-depth", "24",
		"-FrameRate", strconv.Itoa(st.cfg.FrameRate),
		"-AcceptSetDesktopSize",
		"-desktop", desktop,
	)
	d.xvnc.Dir = d.dir
	d.xvnc.Env = d.baseEnv()
	d.xvnc.ExtraFiles = []*os.File{w}
	d.xvncOut = &tail{}
	d.xvnc.Stdout, d.xvnc.Stderr = d.xvncOut, d.xvncOut
	d.xvnc.WaitDelay = time.Second
	d.xvnc.SysProcAttr = d.procAttr()
	err = d.xvnc.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", st.program, err)
	}
	go d.waitXvnc()

	number := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		number <- line
	}()
	select {
	case line := <-number:
		n, perr := strconv.Atoi(strings.TrimSpace(line))
		if perr != nil || n < 0 {
			d.kill()
			<-d.done
			return nil, fmt.Errorf("the display server did not start: %s", d.lastWords())
		}
		d.mu.Lock()
		d.number = n
		d.mu.Unlock()
	case <-ctx.Done():
		d.kill()
		<-d.done
		return nil, fmt.Errorf("the display server did not become ready: %w: %s", context.Cause(ctx), d.lastWords())
	}

	line := cmp.Or(s.CommandLine, st.cfg.DesktopCommand)
	if line == "" {
		close(d.cmdDone)
		return d, nil
	}
	d.cmd = exec.Command("/bin/sh", "-c", line)
	d.cmd.Env = append(d.baseEnv(), d.Environ()...)
	d.cmd.Env = append(d.cmd.Env, "USHER_SESSION_ID="+s.ID)
	d.cmd.Dir = d.dir
	if fi, err := os.Stat(acct.home); err == nil && fi.IsDir() {
		d.cmd.Dir = acct.home
	}
	out := &tail{}
	d.cmd.Stdout, d.cmd.Stderr = out, out
	d.cmd.WaitDelay = time.Second
	d.cmd.SysProcAttr = d.procAttr()
	if err := d.cmd.Start(); err != nil {
		d.kill()
		<-d.done
		return nil, fmt.Errorf("run the session's command: %w", err)
	}
	go func() {
		err := d.cmd.Wait()
		level, msg := slog.LevelDebug, "session command exited"
		if err != nil && !d.isStopping() {
			level, msg = slog.LevelInfo, "session command failed"
		}
		st.log.Log(context.Background(), level, msg, "session", s.ID, "display", d.Name(), "err", err, "output", out.String())
		close(d.cmdDone)
	}()
	return d, nil
}

// baseEnv is the environment of the session's programs: the account's,
// and none of the agent's but PATH and the locale.
func (d *Display) baseEnv() []string {
	env := []string{"HOME=" + d.acct.home, "USER=" + d.acct.name, "LOGNAME=" + d.acct.name, "SHELL=" + d.acct.shell,
		"PATH=" + cmp.Or(os.Getenv("PATH"), "/usr/local/bin:/usr/bin:/bin")}
	for _, k := range []string{"LANG", "LC_ALL", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// procAttr puts a process in its own group, as the session's account
// when that is not the agent's, and has it killed if the agent dies.
func (d *Display) procAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if d.st.root && d.acct.uid != d.st.self.uid {
		a.Credential = &syscall.Credential{Uid: d.acct.uid, Gid: d.acct.gid, Groups: d.acct.groups}
	}
	return a
}

func (d *Display) waitXvnc() {
	err := d.xvnc.Wait()
	d.mu.Lock()
	if !d.stopping {
		if err == nil {
			err = errors.New("exited")
		}
		d.err = fmt.Errorf("the display server of :%d stopped on its own: %w: %s", d.number, err, d.lastWords())
	}
	d.mu.Unlock()
	close(d.done)
}

func (d *Display) isStopping() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stopping
}

// lastWords is the last lines Xvnc wrote, for errors.
func (d *Display) lastWords() string {
	var lines []string
	for l := range strings.SplitSeq(d.xvncOut.String(), "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "no output"
	}
	s := strings.Join(lines[max(len(lines)-4, 0):], " | ")
	if len(s) > 400 {
		s = "..." + s[len(s)-400:]
	}
	return s
}

// kill sends SIGKILL to Xvnc's and the command's process groups.
func (d *Display) kill() { d.signal(syscall.SIGKILL) }

func (d *Display) signal(sig syscall.Signal) {
	if d.cmd != nil && d.cmd.Process != nil {
		syscall.Kill(-d.cmd.Process.Pid, sig)
	}
	select {
	case <-d.done:
	default:
		syscall.Kill(-d.xvnc.Process.Pid, sig)
	}
}

// Name returns the X display's name, the value of DISPLAY (":12").
func (d *Display) Name() string { return ":" + strconv.Itoa(d.number) }

// Number returns the X display's number.
func (d *Display) Number() int { return d.number }

// Account returns the Unix account the display runs as.
func (d *Display) Account() string { return d.acct.name }

// Pid returns the process ID of the display's Xvnc.
func (d *Display) Pid() int { return d.xvnc.Process.Pid }

// Environ returns what a program needs in its environment to reach the
// display: DISPLAY and XAUTHORITY.
func (d *Display) Environ() []string {
	return []string{"DISPLAY=" + d.Name(), "XAUTHORITY=" + d.xauth}
}

// Dial connects to the display's RFB stream (security type None). It
// fails with ErrStopped once the display stopped.
func (d *Display) Dial(ctx context.Context) (net.Conn, error) {
	select {
	case <-d.done:
		return nil, fmt.Errorf("dial display %s: %w", d.Name(), ErrStopped)
	default:
	}
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", d.socket)
	if err != nil {
		return nil, fmt.Errorf("dial display %s: %w", d.Name(), err)
	}
	return c, nil
}

// Done is closed when Xvnc exited, on its own or by Stop.
func (d *Display) Done() <-chan struct{} { return d.done }

// Err returns why Xvnc exited on its own; nil while it runs and after
// Stop.
func (d *Display) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Stop ends the session's command and Xvnc (their process groups:
// SIGTERM, then SIGKILL after Config.StopTimeout or when ctx is done),
// waits for them, and removes the session's directory. Call it also
// after Done, to free what the display holds. It may be called more
// than once; every call waits for the first.
func (d *Display) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() {
		defer close(d.stopped)
		d.mu.Lock()
		d.stopping = true
		d.mu.Unlock()
		d.signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() {
			<-d.cmdDone
			<-d.done
			close(exited)
		}()
		t := time.NewTimer(d.st.cfg.StopTimeout)
		defer t.Stop()
		select {
		case <-exited:
		case <-t.C:
			d.st.log.Warn("display did not stop on SIGTERM; killing it", "session", d.session, "display", d.Name())
			d.kill()
			<-exited
		case <-ctx.Done():
			d.kill()
			<-exited
		}
		// Whatever the command left in its group goes too.
		d.signal(syscall.SIGKILL)
		if err := os.RemoveAll(d.dir); err != nil {
			d.stopErr = fmt.Errorf("stop display %s: %w", d.Name(), err)
		}
		d.st.release()
	})
	<-d.stopped
	return d.stopErr
}

// writeXauthority writes an X authority file of one MIT-MAGIC-COOKIE-1
// for any address and display (family FamilyWild, no number): Xvnc reads
// it with -auth, and the session's programs with XAUTHORITY.
func writeXauthority(path string) error {
	cookie := make([]byte, 16)
	rand.Read(cookie)
	var b []byte
	b = binary.BigEndian.AppendUint16(b, 0xffff) // FamilyWild
	for _, field := range [][]byte{nil, nil, []byte("MIT-MAGIC-COOKIE-1"), cookie} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(field)))
		b = append(b, field...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("the X authority file: %w", err)
	}
	return nil
}

// ensureX11Dir makes /tmp/.X11-unix, where X servers put their sockets,
// world-writable and sticky, as the X servers of accounts other than
// root need it.
func ensureX11Dir() error {
	const dir = "/tmp/.X11-unix"
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o777); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("the X socket directory: %w", err)
		}
		return os.Chmod(dir, 0o777|fs.ModeSticky)
	}
	if err != nil {
		return fmt.Errorf("the X socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("the X socket directory %s is not a directory", dir)
	}
	return nil
}

// tail keeps the last bytes written to it. It is safe for concurrent use.
type tail struct {
	mu sync.Mutex
	b  []byte
}

const tailSize = 2 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = append(t.b[:0], t.b[len(t.b)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.b, []byte("?")))
}
