package figures

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/loadgen"
)

// TestREADMEFiguresComeFromReports: the README's Figures section is
// exactly what docs/figures renders, so that no figure there is typed by
// hand or left behind by a newer report.
func TestREADMEFiguresComeFromReports(t *testing.T) {
	srcs, err := Load(filepath.Join("..", "..", "docs", "figures"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Splice(string(readme), Markdown(srcs))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(readme) {
		t.Fatal("README.md's figures differ from docs/figures: run `go run ./cmd/usher bench figures`")
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rep := loadgen.NewReport("t", "usher bench x --n 1")
	rep.Headlines = []loadgen.Headline{{What: "a | b", Usher: "1 req/s", Ratio: "client-bound"}}
	repDir := filepath.Join(dir, "rep")
	if err := rep.WriteDir(repDir); err != nil {
		t.Fatal(err)
	}
	s, err := FromReport(repDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(filepath.Join(dir, "figs"), "1-x", s); err != nil {
		t.Fatal(err)
	}
	srcs, err := Load(filepath.Join(dir, "figs"))
	if err != nil || len(srcs) != 1 || srcs[0].Name != "1-x" {
		t.Fatalf("%v %+v", err, srcs)
	}
	md := Markdown(srcs)
	for _, want := range []string{"`usher bench x --n 1` (" + time.Now().UTC().Format("2006-01-02"), `| a \| b | 1 req/s | - | client-bound | - | - |`} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	doc := "intro\n" + Begin + "\nold\n" + End + "\nafter\n"
	got, err := Splice(doc, md)
	if err != nil || !strings.HasPrefix(got, "intro\n"+Begin+"\n`usher") || !strings.HasSuffix(got, "\n"+End+"\nafter\n") || strings.Contains(got, "old") {
		t.Fatalf("splice: %v\n%s", err, got)
	}
	if _, err := Splice("no markers", md); !errors.Is(err, ErrNoMarkers) {
		t.Errorf("no markers: %v", err)
	}
	if err := Save(dir, "../x", s); err == nil {
		t.Error("a name with a slash was saved")
	}
	if _, err := Load(filepath.Join(dir, "none")); err == nil {
		t.Error("an empty directory loaded")
	}
	// A report without headlines has nothing to show.
	empty := loadgen.NewReport("t", "usher bench y")
	if err := empty.WriteDir(filepath.Join(dir, "empty")); err != nil {
		t.Fatal(err)
	}
	if _, err := FromReport(filepath.Join(dir, "empty")); err == nil {
		t.Error("a report without headlines was taken")
	}
}
