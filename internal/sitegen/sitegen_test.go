package sitegen

import (
	"reflect"
	"testing"
	"time"
)

// TestGenerateSizes: every size makes a valid configuration with as many
// objects as asked, the same each time, the large one in a few seconds.
func TestGenerateSizes(t *testing.T) {
	const hash = "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"
	for name, n := range map[string]Sizes{"mid": MidSize, "demo": DemoSize, "large": LargeSize} {
		t.Run(name, func(t *testing.T) {
			if name == "large" && testing.Short() {
				t.Skip("large")
			}
			start := time.Now()
			c := Generate(n, hash)
			took := time.Since(start)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			got := Sizes{Zones: len(c.Zones), Groups: len(c.Groups), Users: len(c.Users), Machines: len(c.Machines),
				DeliveryGroups: len(c.DeliveryGroups), Applications: len(c.Applications), Desktops: len(c.Desktops), Entitlements: len(c.Entitlements)}
			if got != n {
				t.Fatalf("generated %+v, want %+v", got, n)
			}
			var hashed int
			for _, u := range c.Users {
				if u.PasswordHash == hash {
					hashed++
				}
			}
			if want := (n.Users + 9) / 10; hashed != want {
				t.Errorf("%d users with the password, want %d", hashed, want)
			}
			seen := map[string]bool{}
			for _, m := range c.Machines {
				if seen[m.Address] {
					t.Fatalf("address %s twice", m.Address)
				}
				seen[m.Address] = true
			}
			if name != "large" && !reflect.DeepEqual(c, Generate(n, hash)) {
				t.Error("two generations of one size differ")
			}
			t.Logf("%s: generated in %v", name, took.Round(time.Millisecond))
		})
	}
}
