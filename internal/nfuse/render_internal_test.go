package nfuse

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/broker"
	"github.com/usher-vdi/usher/internal/icon"
	"github.com/usher-vdi/usher/internal/site"
)

func TestAppendEscaped(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{`<a href="x">&'</a>`, "&lt;a href=&quot;x&quot;&gt;&amp;&apos;&lt;/a&gt;"},
		{"tab\tline\nreturn\r", "tab&#9;line&#10;return&#13;"},
		{"nul\x00bell\x07", "nul\uFFFDbell\uFFFD"},
		{"bad \xff utf-8 \xc3", "bad \uFFFD utf-8 \uFFFD"},
		{"Grüße 密码 🔑", "Grüße 密码 🔑"},
		{"\uFFFE\U0010FFFF", "\uFFFD\U0010FFFF"},
	} {
		if got := string(appendEscaped(nil, tc.in)); got != tc.want {
			t.Errorf("appendEscaped(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestFragmentsAreWellFormed renders a resource whose every field holds
// markup and characters XML cannot carry.
func TestFragmentsAreWellFormed(t *testing.T) {
	nasty := "<x> & \"q\" 'a' \x01\xff ]]> &#0;"
	cfg := &site.Config{
		Settings:       site.Settings{Name: nasty, Domain: nasty},
		Zones:          []site.Zone{{Name: "z", Primary: true}},
		Catalogs:       []site.Catalog{{Name: "c", Kind: site.MultiSession, Zone: "z"}},
		DeliveryGroups: []site.DeliveryGroup{site.NewDeliveryGroup("g", "c")},
		Applications: []site.Resource{{Kind: site.Application, Name: nasty, DisplayName: nasty, Folder: nasty, Description: nasty,
			Icon: "data:image/png;base64,!!", DeliveryGroups: []string{"g"}}},
		Entitlements: []site.Entitlement{{Name: "e", DeliveryGroup: "g", Users: []string{nasty}, Groups: []string{nasty}}},
	}
	snap := broker.NewSnapshot(7, cfg)
	h := &Handler{}
	sc := &snapCache{snap: snap}
	q := appDataQuery{details: detDefaults | detIconInfo | detIcon | detAccessList, settings: settingsFull, folder: ""}
	w := &xmlw{}
	h.writeAppData(w, sc, snap.Resources(), &q)
	d := xml.NewDecoder(strings.NewReader(string(w.b)))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%v in\n%s", err, w.b)
		}
	}
	if strings.Count(string(w.b), "<AppData>") != 1 {
		t.Fatalf("answer %s", w.b)
	}
}

func TestDataIcons(t *testing.T) {
	pngData := icon.Draw("custom", 48)
	uri := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngData)
	h := &Handler{}
	p := &resourceParts{icon: uri}
	if got := h.iconOf(p, 16, false); got != base64.StdEncoding.EncodeToString(pngData) {
		t.Fatal("a data URI's PNG is not sent as it is")
	}
	ico, err := base64.StdEncoding.DecodeString(h.iconOf(p, 32, true))
	if err != nil || !bytes.Equal(ico[22:], pngData) || ico[6] != 32 {
		t.Fatalf("ICO of a data URI: %v % x", err, ico[:22])
	}
	if len(h.icons.cache) != 0 {
		t.Fatal("a data URI icon went into the handler's cache")
	}
	bad := &resourceParts{icon: "data:image/png;base64,AAAA"}
	if _, err := png.Decode(base64.NewDecoder(base64.StdEncoding, strings.NewReader(h.iconOf(bad, 16, false)))); err != nil {
		t.Fatalf("a broken data URI gets no drawn icon: %v", err)
	}
}

func TestBuiltinIconsAreDeterministic(t *testing.T) {
	a, b := icon.Draw("mail", 32), icon.Draw("mail", 32)
	if !bytes.Equal(a, b) {
		t.Fatal("two drawings of one icon differ")
	}
	if bytes.Equal(a, icon.Draw("chart", 32)) {
		t.Fatal("two icons look the same")
	}
	for _, size := range iconSizes {
		img, err := png.Decode(bytes.NewReader(icon.Draw("mail", size)))
		if err != nil || img.Bounds().Dx() != size {
			t.Fatalf("size %d: %v %v", size, err, img.Bounds())
		}
	}
}
