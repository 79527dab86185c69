package broker

import "testing"

func TestSameHost(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"vda-01.example.com:3389", "vda-01.example.com:3389", true},
		{"VDA-01.Example.com.:1494", "vda-01.example.com:3389", true}, // case, trailing dot, port
		{"vda-01.example.com", "vda-01.example.com:3389", true},
		{"10.0.0.1:3389", "10.0.0.1:1494", true},
		{"[::ffff:10.0.0.1]:3389", "10.0.0.1:3389", true},
		{"[2001:db8::1]:3389", "[2001:db8:0::1]:3389", true},
		{"attacker.example:3389", "vda-01.example.com:3389", false},
		{"10.0.0.2:3389", "10.0.0.1:3389", false},
		{"vda-01.example.com.evil:3389", "vda-01.example.com:3389", false},
	} {
		if got := sameHost(c.a, c.b); got != c.want {
			t.Errorf("sameHost(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
