package loadgen

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Levels are the concurrency levels of a closed-model run: a range from
// Start by Step up to Max, or, when List is set, the concurrencies it
// lists. They map onto Stepped's fields as they are.
type Levels struct {
	Start, Step, Max int
	List             []int
}

// ParseLevels reads levels: C1,C2,..., START:STEP:MAX or a single C, which
// is the range C:1:C. Every concurrency is at least 1; a list may be in
// any order, and Rising says whether it rises.
func ParseLevels(s string) (Levels, error) {
	if strings.Contains(s, ":") {
		return parseRange(s)
	}
	var list []int
	for p := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return Levels{}, fmt.Errorf("%q is not a list of positive numbers (C1,C2,...) or START:STEP:MAX", s)
		}
		list = append(list, n)
	}
	if len(list) == 1 {
		return Levels{Start: list[0], Step: 1, Max: list[0]}, nil
	}
	return Levels{List: list}, nil
}

func parseRange(s string) (Levels, error) {
	parts := strings.Split(s, ":")
	var nums [3]int
	if len(parts) != len(nums) {
		return Levels{}, fmt.Errorf("%q is not START:STEP:MAX (or C1,C2,...)", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return Levels{}, fmt.Errorf("%q is not START:STEP:MAX (or C1,C2,...)", s)
		}
		nums[i] = n
	}
	l := Levels{Start: nums[0], Step: nums[1], Max: nums[2]}
	switch {
	case l.Start < 1:
		return Levels{}, fmt.Errorf("%q starts below 1 (START:STEP:MAX)", s)
	case l.Max < l.Start:
		return Levels{}, fmt.Errorf("%q: maximum %d is below the start %d (START:STEP:MAX)", s, l.Max, l.Start)
	case l.Step < 1 && l.Max > l.Start:
		return Levels{}, fmt.Errorf("%q: the step must be at least 1 (START:STEP:MAX)", s)
	}
	return l, nil
}

// Concurrencies returns each level in turn.
func (l Levels) Concurrencies() []int {
	return Stepped{Start: l.Start, Step: l.Step, Max: l.Max, Levels: l.List}.Concurrencies()
}

// Rising reports whether each level is above the one before, as a stepped
// run needs.
func (l Levels) Rising() bool {
	for i := 1; i < len(l.List); i++ {
		if l.List[i] <= l.List[i-1] {
			return false
		}
	}
	return true
}

// ParseRate reads an arrival rate: R per second, or FROM:TO for one going
// from FROM to TO (R is R:R). Neither is negative and one is above zero.
func ParseRate(s string) (from, to float64, err error) {
	a, b, ranged := strings.Cut(s, ":")
	from, err = parseRate(a)
	to = from
	if err == nil && ranged {
		to, err = parseRate(b)
	}
	if err != nil || from < 0 || to < 0 || from+to == 0 {
		return 0, 0, fmt.Errorf("%q is not R or FROM:TO arrivals per second", s)
	}
	return from, to, nil
}

// ParseRates reads a list of arrival rates per second, R1,R2,..., each
// above zero.
func ParseRates(s string) ([]float64, error) {
	var rates []float64
	for p := range strings.SplitSeq(s, ",") {
		r, err := parseRate(p)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("%q is not a list of positive rates (R1,R2,...)", s)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// FormatRates writes rates as ParseRates reads them.
func FormatRates(rates []float64) string {
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = fmtFloat(r)
	}
	return strings.Join(parts, ",")
}

// parseRate reads one rate, a finite decimal number.
func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err == nil && (math.IsInf(r, 0) || math.IsNaN(r)) {
		err = fmt.Errorf("rate %q is not finite", s)
	}
	return r, err
}
