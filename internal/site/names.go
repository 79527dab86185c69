package site

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// NormalizeName returns an account name (a user's, a group's or an
// admin's) as it is stored: in Unicode normal form C, so that "é" typed
// as one character or as "e" and a combining accent is one name.
func NormalizeName(name string) string { return norm.NFC.String(name) }

// FoldName returns the key account names are matched by: the name in
// normal form C with every character case-folded, as Windows matches
// account names. "User0001", "user0001" and "USER0001" fold alike.
func FoldName(name string) string {
	ascii := true
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(name)
	}
	folded := strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, norm.NFC.String(name))
	return norm.NFC.String(folded)
}

// nameScripts are the scripts an account name's letters may come from;
// han, hiragana and katakana count as one, as Japanese writes them
// together.
var nameScripts = func() map[string]*unicode.RangeTable {
	m := make(map[string]*unicode.RangeTable, len(unicode.Scripts))
	for name, t := range unicode.Scripts {
		if name != "Common" && name != "Inherited" {
			m[name] = t
		}
	}
	return m
}()

func scriptOf(r rune) string {
	if r < utf8.RuneSelf {
		return "Latin"
	}
	for name, t := range nameScripts {
		if unicode.Is(t, r) {
			switch name {
			case "Han", "Hiragana", "Katakana":
				return "Japanese or Chinese"
			}
			return name
		}
	}
	return ""
}

// AccountNameRule says which account names are accepted, for errors.
const AccountNameRule = "letters of one script (with their accents), ASCII digits 0-9 and . - _"

// ValidateAccountName checks the name of a user, a group or an admin, in
// normal form C: what ValidateName checks, and then that it holds only
// letters of one script (with their combining marks), ASCII digits and
// ". - _", so that no two names look alike while being different (a
// Latin "a" beside a Cyrillic "а").
func ValidateAccountName(kind Kind, name string) error {
	if err := ValidateName(kind, name); err != nil {
		return err
	}
	if !norm.NFC.IsNormalString(name) {
		return invalid(kind, name, "is not in Unicode normal form C").At("name")
	}
	script, first := "", ""
	prevLetter := false
	for _, r := range name {
		switch {
		case r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			prevLetter = false
		case unicode.IsLetter(r):
			s := scriptOf(r)
			if s == "" {
				return invalid(kind, name, "%q is a letter of no script; a name holds %s", r, AccountNameRule).At("name")
			}
			if script == "" {
				script, first = s, string(r)
			} else if s != script {
				return invalid(kind, name, "mixes scripts (%q is %s, %q is %s); a name holds %s", first, script, r, s, AccountNameRule).At("name")
			}
			prevLetter = true
		case unicode.Is(unicode.M, r) && prevLetter:
			// a combining mark on a letter: an accent, a vowel sign
		default:
			return invalid(kind, name, "contains %q; a name holds %s", r, AccountNameRule).At("name")
		}
	}
	return nil
}
