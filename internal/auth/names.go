package auth

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// NameKey returns the key one account's logons are counted and cached
// under, the same for every spelling an LDAP directory matches to one
// entry by its string preparation (RFC 4518, caseIgnoreMatch): the name in
// Unicode normal form KC (a fullwidth "ＢＯＢ" is "BOB"), case-folded
// ("BOB" is "bob"), with every space, tab or line break a single space,
// none at either end, and the characters RFC 4518 maps to nothing (soft
// hyphens, zero-width and other format characters, controls) dropped. It
// is idempotent: NameKey(NameKey(s)) == NameKey(s).
//
// Invalid UTF-8 is kept as U+FFFD, so that no two invalid byte strings
// share a key with a valid name by accident of decoding.
func NameKey(name string) string {
	if k, ok := asciiKey(name); ok {
		return k
	}
	k := name
	// Folding can leave a string that NFKC changes again, and NFKC one
	// that folds again (rarely): iterate to the fixed point, which a few
	// rounds always reach.
	for range 4 {
		next := spaces(norm.NFKC.String(foldCaser.String(norm.NFKC.String(mapped(k)))))
		if next == k {
			break
		}
		k = next
	}
	return k
}

var foldCaser = cases.Fold()

// asciiKey is NameKey for printable ASCII, without allocating when the
// name is its own key already.
func asciiKey(name string) (string, bool) {
	own := true
	prevSpace := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= utf8.RuneSelf || c < ' ' || c == 0x7f:
			return "", false
		case c >= 'A' && c <= 'Z':
			own = false
		case c == ' ':
			if prevSpace {
				own = false
			}
			prevSpace = true
			continue
		}
		prevSpace = false
	}
	if own && (name == "" || name[len(name)-1] != ' ') {
		return name, true
	}
	return strings.Join(strings.Fields(strings.ToLower(name)), " "), true
}

// mapped replaces every space character with U+0020 and drops what RFC
// 4518 (2.2) maps to nothing: controls and format characters.
func mapped(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r), unicode.Is(unicode.Zs, r):
			return ' '
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r), r == '\u034f', unicode.Is(unicode.Variation_Selector, r):
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// spaces collapses runs of U+0020 into one and trims both ends, after
// mapping again what NFKC or folding may have turned into spaces or
// format characters.
func spaces(s string) string {
	return strings.Join(strings.Fields(mapped(s)), " ")
}
