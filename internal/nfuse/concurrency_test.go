package nfuse_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/usher-vdi/usher/internal/demo"
)

// TestConcurrentEnumerationsAndLaunches runs many users' enumerations,
// launches and logons at once over HTTP; with -race it checks the caches
// and the launch table.
func TestConcurrentEnumerationsAndLaunches(t *testing.T) {
	t.Parallel()
	f := newFixture(t, options{})
	srv := httptest.NewServer(f.handler)
	t.Cleanup(srv.Close)
	const workers, rounds = 24, 12
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			user := demo.UserName(201 + w) // finance users: 401 resources
			for i := range rounds {
				var body, want string
				switch i % 3 {
				case 0:
					body, want = seed004For(user, userPassword, "DEMO"), "<InName>office-writer-001</InName>"
				case 1:
					body, want = requestWith("RequestAddress", fmt.Sprintf(`<Name><AppName>office-writer-%03d</AppName></Name>`, 1+10*(i%6))+credentials(user, userPassword, "DEMO")), "<TicketTag>"
				case 2:
					body, want = requestWith("RequestReconnectSessionData", credentials(user, userPassword, "DEMO")), "<SessionData>"
				}
				resp, err := srv.Client().Post(srv.URL+"/Scripts/WPnBr.dll", "text/xml", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), want) {
					errs <- fmt.Errorf("%s round %d: %d %.300s", user, i, resp.StatusCode, raw)
				}
				if n := strings.Count(string(raw), "<AppData>"); i%3 == 0 && n != 401 {
					errs <- fmt.Errorf("%s round %d: %d resources, want 401", user, i, n)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
