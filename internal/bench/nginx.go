package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/usher-vdi/usher/internal/benchkit"
)

// DefaultNginx is where Debian installs nginx.
const DefaultNginx = "/usr/sbin/nginx"

// ErrNoNginx is returned by StartNginx when the binary is missing.
var ErrNoNginx = errors.New("nginx is not installed")

// Nginx is an nginx child process serving one file, the yardstick of the
// enumeration bench: the practical ceiling for answering the same bytes.
type Nginx struct {
	URL  string // of the file
	proc *benchkit.Proc
	dir  string
}

// NginxTuning sets what an nginx yardstick is given. The zero value is
// the in-process bench's: a worker per CPU, sendfile and tcp_nopush on,
// the kernel's send buffer.
type NginxTuning struct {
	// Workers is worker_processes; 0: auto.
	Workers int
	// NoPush turns tcp_nopush off: nginx served the enumeration's answer
	// faster without it, and usher does not cork its heads either.
	NoPush bool
	// SendBuffer is the listen socket's sndbuf in bytes; 0: the kernel's.
	SendBuffer int64
	// CPUs, when set, pins every worker to these CPUs.
	CPUs []int
	// NullPath, when set, also serves len(body) bytes of padding as a
	// static file at this path: the cheapest answer of that size, to
	// calibrate a client's ceiling.
	NullPath string
}

// StartNginx runs binary in the foreground with a generated configuration
// in a temporary directory: it listens on a free 127.0.0.1 port and
// answers GET and POST of urlPath with body (POST to a static file is
// answered as GET). It returns ErrNoNginx when binary does not exist.
func StartNginx(ctx context.Context, binary, urlPath string, body []byte, contentType string) (*Nginx, error) {
	return StartTunedNginx(ctx, binary, NginxTuning{}, urlPath, body, contentType)
}

// StartTunedNginx is StartNginx with tuning t.
func StartTunedNginx(ctx context.Context, binary string, t NginxTuning, urlPath string, body []byte, contentType string) (_ *Nginx, err error) {
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("%w (%s)", ErrNoNginx, binary)
	}
	dir, err := os.MkdirTemp("", "usher-bench-nginx-*")
	if err != nil {
		return nil, err
	}
	n := &Nginx{dir: dir}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	// nginx's workers may run as nobody: they must read the files.
	www := filepath.Join(dir, "www")
	file := filepath.Join(www, filepath.FromSlash(strings.TrimPrefix(urlPath, "/")))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		return nil, err
	}
	for d := filepath.Dir(file); len(d) >= len(dir); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	if t.NullPath != "" {
		null := filepath.Join(www, filepath.FromSlash(strings.TrimPrefix(t.NullPath, "/")))
		if filepath.Dir(null) != www {
			return nil, fmt.Errorf("nginx null path %q is not at the root", t.NullPath)
		}
		if err := os.WriteFile(null, bytes.Repeat([]byte{'x'}, len(body)), 0o644); err != nil {
			return nil, err
		}
	}
	port, err := benchkit.FreePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(binary, dir, www, port, contentType, t)), 0o644); err != nil {
		return nil, err
	}
	n.URL = fmt.Sprintf("http://127.0.0.1:%d%s", port, urlPath)
	n.proc, err = benchkit.StartProc(ctx, benchkit.ProcSpec{
		Name: "nginx", Argv: []string{binary, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")},
		Addr: fmt.Sprintf("127.0.0.1:%d", port),
		Ready: func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", n.URL, resp.Status)
			}
			return nil
		},
	})
	if err != nil {
		// nginx tells why in its error log.
		log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return nil, fmt.Errorf("%w %s", err, bytes.TrimSpace(log))
	}
	return n, nil
}

// Pid is the nginx master's process ID.
func (n *Nginx) Pid() int { return n.proc.Pid() }

// Stop ends nginx (SIGTERM, a fast shutdown whose workers go too; then
// SIGKILL after 30 s) and removes its directory.
func (n *Nginx) Stop() {
	if n.proc != nil {
		n.proc.Stop()
		n.proc = nil
	}
	os.RemoveAll(n.dir)
}

func nginxConfig(binary, dir, www string, port int, contentType string, t NginxTuning) string {
	var b strings.Builder
	workers, nopush, sndbuf := "auto", "on", ""
	if t.Workers > 0 {
		workers = fmt.Sprint(t.Workers)
	}
	if t.NoPush {
		nopush = "off"
	}
	if t.SendBuffer > 0 {
		sndbuf = fmt.Sprintf(" sndbuf=%d", t.SendBuffer)
	}
	fmt.Fprintf(&b, "daemon off;\nworker_processes %s;\npid %s;\n", workers, filepath.Join(dir, "nginx.pid"))
	if len(t.CPUs) > 0 {
		mask := make([]byte, slices.Max(t.CPUs)+1)
		for i := range mask {
			mask[i] = '0'
		}
		for _, c := range t.CPUs {
			mask[len(mask)-1-c] = '1'
		}
		fmt.Fprintf(&b, "worker_cpu_affinity %s;\n", strings.TrimSpace(strings.Repeat(string(mask)+" ", max(t.Workers, 1))))
	}
	fmt.Fprintf(&b, "error_log %s warn;\n", filepath.Join(dir, "error.log"))
	fmt.Fprintf(&b, "events { worker_connections 8192; }\nhttp {\n  access_log off;\n  sendfile on;\n  tcp_nopush %s;\n", nopush)
	b.WriteString("  keepalive_requests 1000000;\n  keepalive_timeout 120s;\n")
	// usher keeps its answers open in memory: nginx keeps its files open.
	b.WriteString("  open_file_cache max=64 inactive=600s;\n  open_file_cache_valid 600s;\n")
	fmt.Fprintf(&b, "  default_type %s;\n", contentType)
	// Temporary paths in our directory, for every module built in: the
	// defaults are under /var/lib/nginx.
	v, _ := exec.Command(binary, "-V").CombinedOutput()
	for _, m := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if m != "client_body" && bytes.Contains(v, []byte("--without-http_"+m+"_module")) {
			continue
		}
		fmt.Fprintf(&b, "  %s_temp_path %s;\n", m, filepath.Join(dir, "tmp-"+m))
	}
	fmt.Fprintf(&b, "  server {\n    listen 127.0.0.1:%d%s;\n    root %s;\n", port, sndbuf, www)
	b.WriteString("    location / { error_page 405 =200 $uri; }\n  }\n}\n")
	return b.String()
}
