package loadgen_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/usher-vdi/usher/internal/loadgen"
)

func TestParseLevels(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     loadgen.Levels
		levels   []int
		rising   bool
	}{
		{"range", "10:10:100", loadgen.Levels{Start: 10, Step: 10, Max: 100}, []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, true},
		{"range past its maximum stops below it", "100:300:800", loadgen.Levels{Start: 100, Step: 300, Max: 800}, []int{100, 400, 700}, true},
		{"range of one level", "5:0:5", loadgen.Levels{Start: 5, Step: 0, Max: 5}, []int{5}, true},
		{"range with spaces", " 1 : 2 : 5 ", loadgen.Levels{Start: 1, Step: 2, Max: 5}, []int{1, 3, 5}, true},
		{"one level", "3", loadgen.Levels{Start: 3, Step: 1, Max: 3}, []int{3}, true},
		{"list", "10,20,40,60,100", loadgen.Levels{List: []int{10, 20, 40, 60, 100}}, []int{10, 20, 40, 60, 100}, true},
		{"list with spaces", "12, 24 ,36", loadgen.Levels{List: []int{12, 24, 36}}, []int{12, 24, 36}, true},
		{"list that falls", "48,12", loadgen.Levels{List: []int{48, 12}}, []int{48, 12}, false},
		{"list that repeats", "6,6", loadgen.Levels{List: []int{6, 6}}, []int{6, 6}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadgen.ParseLevels(tc.in)
			if err != nil {
				t.Fatalf("ParseLevels(%q): %v", tc.in, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("ParseLevels(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			if c := got.Concurrencies(); !slices.Equal(c, tc.levels) {
				t.Errorf("Concurrencies() = %v, want %v", c, tc.levels)
			}
			if got.Rising() != tc.rising {
				t.Errorf("Rising() = %t, want %t", got.Rising(), tc.rising)
			}
		})
	}
}

func TestParseLevelsErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", `"" is not a list of positive numbers (C1,C2,...) or START:STEP:MAX`},
		{"word", "many", "not a list of positive numbers"},
		{"zero in a list", "0,10", "not a list of positive numbers"},
		{"negative in a list", "10,-20", "not a list of positive numbers"},
		{"empty element", "10,,20", "not a list of positive numbers"},
		{"fraction", "1.5", "not a list of positive numbers"},
		{"two parts", "10:100", `"10:100" is not START:STEP:MAX`},
		{"four parts", "1:2:3:4", "is not START:STEP:MAX"},
		{"not a number", "10:x:20", "is not START:STEP:MAX"},
		{"list and range", "10,20:30:40", "is not START:STEP:MAX"},
		{"start at zero", "0:10:100", "starts below 1"},
		{"maximum below the start", "20:10:10", "maximum 10 is below the start 20"},
		{"no step", "10:0:100", "the step must be at least 1 (START:STEP:MAX)"},
		{"step backwards", "10:-10:100", "the step must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadgen.ParseLevels(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseLevels(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("%q", tc.in)) {
				t.Errorf("error %q does not start with the input", err)
			}
		})
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in       string
		from, to float64
	}{
		{"20", 20, 20},
		{"0.5", 0.5, 0.5},
		{"50:100", 50, 100},
		{"0:10", 0, 10},
		{"10:0", 10, 0},
		{" 5 : 7.5 ", 5, 7.5},
	} {
		from, to, err := loadgen.ParseRate(tc.in)
		if err != nil || from != tc.from || to != tc.to {
			t.Errorf("ParseRate(%q) = %v, %v, %v; want %v, %v", tc.in, from, to, err, tc.from, tc.to)
		}
	}
	for _, in := range []string{"", "0", "0:0", "-1", "5:-1", "fast", "5:", "1:2:3", "inf", "NaN", "1e400"} {
		if from, to, err := loadgen.ParseRate(in); err == nil || !strings.Contains(err.Error(), "is not R or FROM:TO arrivals per second") {
			t.Errorf("ParseRate(%q) = %v, %v, %v; want an error", in, from, to, err)
		}
	}
}

func TestParseRates(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []float64
	}{
		{"10", []float64{10}},
		{"20,40,80,160", []float64{20, 40, 80, 160}},
		{"0.5, 1.5", []float64{0.5, 1.5}},
	} {
		got, err := loadgen.ParseRates(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseRates(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if s := loadgen.FormatRates(got); s != strings.ReplaceAll(tc.in, " ", "") {
			t.Errorf("FormatRates(%v) = %q, want %q", got, s, tc.in)
		}
	}
	for _, in := range []string{"", "10,fast", "0", "10,-5", "10,,20", "inf", "10:20"} {
		if got, err := loadgen.ParseRates(in); err == nil || !strings.Contains(err.Error(), "is not a list of positive rates") {
			t.Errorf("ParseRates(%q) = %v, %v; want an error", in, got, err)
		}
	}
}

func FuzzParseLevels(f *testing.F) {
	for _, s := range []string{"10:10:100", "10,20,40", "3", "20:10:10", "10:0:100", "1,,2", " 7 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := loadgen.ParseLevels(s)
		if err != nil {
			return
		}
		if l.List == nil && (l.Max-l.Start)/max(l.Step, 1) > 1e5 {
			return // a valid range too long to expand here
		}
		c := l.Concurrencies()
		if len(c) == 0 || slices.Min(c) < 1 {
			t.Fatalf("ParseLevels(%q) = %+v: levels %v", s, l, c)
		}
		if l.List == nil && !slices.IsSorted(c) {
			t.Fatalf("ParseLevels(%q) = %+v: range %v does not rise", s, l, c)
		}
	})
}
