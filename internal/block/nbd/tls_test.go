package nbd

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/block"
	"github.com/usher-vdi/usher/internal/block/blocktest"
)

// startTLSServer serves a 16 MiB test image with TLS, required or not.
func startTLSServer(t *testing.T, require bool) (addr string, certs *blocktest.Certs, data []byte) {
	t.Helper()
	certs = blocktest.WriteCerts(t)
	src, data := testImage(t)
	f, err := block.OpenFile(src, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Exports: Devices{"disk": f}, Logger: slog.New(slog.DiscardHandler), TLS: certs.Server, RequireTLS: require}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String(), certs, data
}

func TestTLSClient(t *testing.T) {
	for _, require := range []bool{false, true} {
		addr, certs, data := startTLSServer(t, require)
		ctx := context.Background()
		d := &Dialer{TLS: &tls.Config{RootCAs: certs.Roots}}
		c, err := d.DialURI(ctx, "nbds://"+addr+"/disk")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.nc.(*tls.Conn); !ok {
			t.Fatal("the connection is not TLS")
		}
		got := make([]byte, len(data))
		if err := c.ReadAt(ctx, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("content read over TLS differs")
		}
		if err := c.WriteAt(ctx, []byte("over tls"), 4<<20, block.FUA); err != nil {
			t.Fatal(err)
		}
		// The write made data of the first block of the hole.
		if got := blocktest.Extents(t, c, 0, c.Size()); len(got) != 4 || got[0].Length != 4<<20+4096 {
			t.Fatalf("extents over TLS %v", got)
		}
		c.Close()

		// A client that does not trust the CA gives up.
		if _, err := (&Dialer{TLS: &tls.Config{}}).Dial(ctx, "tcp", addr, "disk"); err == nil || !strings.Contains(err.Error(), "tls") {
			t.Fatalf("dial with an unknown CA: %v", err)
		}
		// Without TLS: fine unless the server requires it.
		c, err = Dial(ctx, "tcp", addr, "disk")
		if require {
			if err == nil || !strings.Contains(err.Error(), "requires TLS") {
				t.Fatalf("plaintext dial of a server that requires TLS: %v", err)
			}
		} else if err != nil {
			t.Fatalf("plaintext dial of a server that offers TLS: %v", err)
		} else {
			c.Close()
		}
	}
}

func TestStartTLSRefusals(t *testing.T) {
	t.Run("NoTLS", func(t *testing.T) {
		r := rawDial(t, startServer(t, Devices{"d": block.NewMemory(4096)}))
		r.option(optStartTLS, nil)
		if typ, _ := r.reply(optStartTLS); typ != repErrUnsup {
			t.Fatalf("STARTTLS on a server without TLS: reply %#x, want NBD_REP_ERR_UNSUP", typ)
		}
	})
	t.Run("RequiredBeforeOptions", func(t *testing.T) {
		addr, _, _ := startTLSServer(t, true)
		r := rawDial(t, addr)
		for _, opt := range []uint32{optList, optStructuredReply, optGo, optInfo} {
			data := []byte(nil)
			if opt == optGo || opt == optInfo {
				data = goData("disk")
			}
			r.option(opt, data)
			if typ, _ := r.reply(opt); typ != repErrTLSReqd {
				t.Fatalf("option %d before STARTTLS: reply %#x, want NBD_REP_ERR_TLS_REQD", opt, typ)
			}
		}
		r.option(optStartTLS, []byte{1})
		if typ, _ := r.reply(optStartTLS); typ != repErrInvalid {
			t.Fatalf("STARTTLS with data: reply %#x, want NBD_REP_ERR_INVALID", typ)
		}
		// NBD_OPT_EXPORT_NAME cannot be refused: the server hangs up.
		r.option(optExportName, []byte("disk"))
		var b [1]byte
		if _, err := r.nc.Read(b[:]); err == nil {
			t.Fatal("the server answered NBD_OPT_EXPORT_NAME before STARTTLS")
		}
	})
	t.Run("Twice", func(t *testing.T) {
		addr, certs, _ := startTLSServer(t, true)
		r := rawDial(t, addr)
		r.option(optStartTLS, nil)
		if typ, _ := r.reply(optStartTLS); typ != repAck {
			t.Fatalf("STARTTLS: reply %#x, want ACK", typ)
		}
		tc := tls.Client(r.nc, &tls.Config{RootCAs: certs.Roots, ServerName: "127.0.0.1"})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		r.nc = tc
		r.option(optStartTLS, nil)
		if typ, _ := r.reply(optStartTLS); typ != repErrInvalid {
			t.Fatalf("second STARTTLS: reply %#x, want NBD_REP_ERR_INVALID", typ)
		}
		r.option(optList, nil)
		if typ, data := r.reply(optList); typ != repServer || !bytes.Contains(data, []byte("disk")) {
			t.Fatalf("NBD_OPT_LIST over TLS: reply %#x %q", typ, data)
		}
	})
}

// TestTLSInterop connects qemu-img and nbdinfo to the server over TLS
// with the CA in a GnuTLS certificate directory.
func TestTLSInterop(t *testing.T) {
	addr, certs, data := startTLSServer(t, true)
	host, port, _ := net.SplitHostPort(addr)
	if _, err := exec.LookPath("nbdinfo"); err == nil {
		out := run(t, "nbdinfo", "--map", "nbds://"+addr+"/disk?tls-certificates="+certs.Dir)
		if f := strings.Fields(out); len(f) < 8 || f[1] != "4194304" || f[6] != "3" {
			t.Fatalf("nbdinfo --map over TLS:\n%s", out)
		}
		// And plaintext is refused by the server.
		if out, err := exec.Command("nbdinfo", "nbd://"+addr+"/disk").CombinedOutput(); err == nil {
			t.Fatalf("nbdinfo without TLS got in:\n%s", out)
		}
	}
	if _, err := exec.LookPath("qemu-img"); err == nil {
		raw := filepath.Join(t.TempDir(), "copy.raw")
		run(t, "qemu-img", "convert", "-O", "raw",
			"--object", "tls-creds-x509,id=tls0,endpoint=client,dir="+certs.Dir,
			"--image-opts", "driver=nbd,host="+host+",port="+port+",export=disk,tls-creds=tls0", raw)
		if b, err := os.ReadFile(raw); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("qemu-img convert over TLS: content differs (%v)", err)
		}
	}
}
