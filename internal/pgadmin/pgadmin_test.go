package pgadmin

import "testing"

func TestDSNs(t *testing.T) {
	for _, tc := range []struct {
		dsn, via, server string
	}{
		{"postgres://u:pw@db.example:5433/test?sslmode=disable&host=/tmp", "postgres://u:pw@127.0.0.1:9/test?sslmode=disable", "unix /tmp/.s.PGSQL.5433"},
		{"postgres://u@10.0.0.1/test", "postgres://u@127.0.0.1:9/test", "tcp 10.0.0.1:5432"},
		{"host=db.example port=5433 dbname=test", "host=db.example port=5433 dbname=test host='127.0.0.1' port='9'", "tcp db.example:5433"},
	} {
		via, err := Via(tc.dsn, "127.0.0.1:9")
		if err != nil || via != tc.via {
			t.Errorf("Via(%q) = %q, %v; want %q", tc.dsn, via, err, tc.via)
		}
		network, server, err := Server(tc.dsn)
		if err != nil || network+" "+server != tc.server {
			t.Errorf("Server(%q) = %s %s, %v; want %s", tc.dsn, network, server, err, tc.server)
		}
	}
	if got, _ := With("postgres://h/d?a=1", "search_path", "s x"); got != "postgres://h/d?a=1&search_path=s+x" {
		t.Errorf("dsnWith URL: %q", got)
	}
	if got, _ := With("host=h", "application_name", `it's`); got != `host=h application_name='it\'s'` {
		t.Errorf("dsnWith key=value: %q", got)
	}
	if !Sets("postgres://h/d?sslmode=require", "sslmode") || Sets("host=h", "sslmode") || !Sets("host=h sslmode=disable", "sslmode") {
		t.Error("dsnSets")
	}
}
