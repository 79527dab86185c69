package site_test

import (
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/site"
)

func TestFoldName(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"User0001", "user0001"},
		{"USER0042", "user0042"},
		{"jose\u0301", "JOS\u00c9"},
		{"\u0391\u03b8\u03b7\u03bd\u03ac", "\u0391\u0398\u0397\u039d\u0386"}, // Αθηνά, ΑΘΗΝΆ
	} {
		if got, want := site.FoldName(tc.a), site.FoldName(tc.b); got != want {
			t.Errorf("FoldName(%q) = %q, FoldName(%q) = %q; want equal", tc.a, got, tc.b, want)
		}
	}
	if site.FoldName("user1") == site.FoldName("user2") {
		t.Error("different names fold alike")
	}
}

func TestValidateAccountName(t *testing.T) {
	for _, tc := range []struct {
		name, problem string // problem "" when valid
	}{
		{"user0001", ""},
		{"first.last_2-b", ""},
		{"jos\u00e9", ""},
		{"\u0418\u0432\u0430\u043d", ""},       // Иван
		{"\u5c71\u7530\u305f\u308d\u3046", ""}, // 山田たろう: han and hiragana
		{"p\u0430ypal", "mixes scripts"},       // Cyrillic а among Latin
		{"jose\u0301", "normal form C"},
		{"first last", "contains ' '"},
		{"a+b", "contains '+'"},
		{"user\u00b9", "contains"}, // superscript one
		{"\u0301a", "contains"},    // a mark on no letter
	} {
		err := site.ValidateAccountName(site.KindUser, tc.name)
		switch {
		case tc.problem == "" && err != nil:
			t.Errorf("%q: %v", tc.name, err)
		case tc.problem != "" && (site.ErrorCode(err) != site.EInvalid || !strings.Contains(site.ErrorMessage(err), tc.problem)):
			t.Errorf("%q: got %v, want an invalid error saying %q", tc.name, err, tc.problem)
		case tc.problem != "" && !strings.Contains(site.ErrorMessage(err), site.AccountNameRule) && tc.problem != "normal form C":
			t.Errorf("%q: %v does not state the rule", tc.name, err)
		}
	}
}
