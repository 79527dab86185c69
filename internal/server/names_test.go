package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/server"
)

// TestLogonIgnoresCase logs on to a demo site as USER0042 and DEMO\User0042
// and checks that both are the demo's user0042, with its resources, and
// that the admin API takes ADMIN as admin.
func TestLogonIgnoresCase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := server.Open(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Demo: true, DemoPassword: "pw-1234"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	resources := func(username string) int {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"username": username, "password": "pw-1234"})
		resp, err := http.Post(s.URL()+"/api/v1/login", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		var login struct {
			Token string `json:"token"`
		}
		err = json.NewDecoder(resp.Body).Decode(&login)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || login.Token == "" {
			t.Fatalf("log on as %s: %d, %v", username, resp.StatusCode, err)
		}
		req, _ := http.NewRequest("GET", s.URL()+"/api/v1/resources", nil)
		req.Header.Set("Authorization", "Bearer "+login.Token)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Resources []json.RawMessage `json:"resources"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("resources of %s: %d, %v", username, resp.StatusCode, err)
		}
		return len(list.Resources)
	}
	want := resources("user0042")
	if want == 0 {
		t.Fatal("user0042 has no resources")
	}
	for _, name := range []string{"USER0042", `DEMO\User0042`, "UsEr0042@demo"} {
		if got := resources(name); got != want {
			t.Errorf("%s sees %d resources, user0042 %d", name, got, want)
		}
	}

	req, _ := http.NewRequest("GET", s.URL()+"/api/v1/admin/users/USER0042", nil)
	req.SetBasicAuth("ADMIN", "pw-1234")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var u struct {
		Name string `json:"name"`
	}
	err = json.NewDecoder(resp.Body).Decode(&u)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || u.Name != "user0042" {
		t.Fatalf("admin ADMIN gets user USER0042: %d, %+v, %v", resp.StatusCode, u, err)
	}
}
