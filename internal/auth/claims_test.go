package auth

import (
	"strings"
	"testing"
	"time"
)

func TestIssueClaimsCarriesTheID(t *testing.T) {
	s, err := NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	tok, exp := s.IssueClaims(Claims{Subject: "vda-1", Audience: "vda", ID: "cred-7", Expires: s.Now().Add(time.Hour)})
	c, err := s.Verify(tok, "vda")
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if c.Subject != "vda-1" || c.ID != "cred-7" || !c.Expires.Equal(exp) {
		t.Errorf("claims = %+v, want vda-1, cred-7, expiring %v", c, exp)
	}
	plain, _ := s.Issue("vda-1", "vda", time.Hour)
	if c, err := s.Verify(plain, "vda"); err != nil || c.ID != "" {
		t.Errorf("a token without an ID verifies as %+v, %v; want no ID", c, err)
	}
}
