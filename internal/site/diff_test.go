package site_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/usher-vdi/usher/internal/site"
	"github.com/usher-vdi/usher/internal/sitegen"
)

const testHash = "$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"

// wantSameDiff fails the test unless Diff and the reference agree on
// current and desired.
func wantSameDiff(t *testing.T, what string, current, desired *site.Config) {
	t.Helper()
	got, want := site.Diff(current, desired), site.DiffReflect(current, desired)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\nDiff:\n%s\nreference:\n%s", what, got, want)
	}
}

// TestDiffMatchesReference holds Diff to the reference (maps and
// reflect.DeepEqual) on random changes of a generated site: mostly one
// object created, updated or deleted, sometimes a few at once, and
// sometimes lists left unsorted or naming an object twice.
func TestDiffMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  sitegen.Sizes
		runs  int
		short bool
	}{
		{"demo", sitegen.DemoSize, 600, true},
		{"large", sitegen.LargeSize, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && !tc.short {
				t.Skip("large site: not with -short")
			}
			current := sitegen.Generate(tc.size, testHash)
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			for i := range tc.runs {
				desired := copyLists(current)
				n := 1
				if i%8 == 7 {
					n = 2 + rng.IntN(4)
				}
				var what []string
				for range n {
					what = append(what, change(rng, desired, i))
				}
				switch i % 16 {
				case 5: // unsorted
					if l := reflect.ValueOf(desired).Elem().Field(2 + rng.IntN(9)); l.Len() > 1 { // past Settings and Directory
						reflect.Swapper(l.Interface())(0, l.Len()-1)
						what = append(what, "unsorted")
					}
				case 11: // an object twice
					desired.Users = append(desired.Users, desired.Users[rng.IntN(len(desired.Users))])
					what = append(what, "a user twice")
				default:
					desired.Normalize()
				}
				wantSameDiff(t, fmt.Sprint(what), current, desired)
			}
		})
	}
}

// TestDiffComparesEveryField changes each field of each kind of object,
// down to nested ones, and expects an update wherever the reference
// sees one: a field added to a type and not to its comparison fails here.
func TestDiffComparesEveryField(t *testing.T) {
	c := sitegen.Generate(sitegen.MidSize, testHash)
	if len(c.Targets) == 0 {
		v := 3
		c.Targets = []site.Target{{Name: "pc01", MAC: "52:54:00:00:00:01", Image: "win11", Version: &v,
			Cache: site.CacheRAMOverflow, RAM: "256MiB", Description: "a target"}}
	}
	cv := reflect.ValueOf(c).Elem()
	for k := range cv.NumField() {
		list := cv.Field(k)
		if list.Kind() != reflect.Slice {
			continue
		}
		for _, path := range leafFields(list.Type().Elem(), nil) {
			desired := copyLists(c)
			o := reflect.ValueOf(desired).Elem().Field(k).Index(0)
			switch f := o.FieldByIndex(path); f.Kind() {
			case reflect.String:
				f.SetString(f.String() + "x")
			case reflect.Bool:
				f.SetBool(!f.Bool())
			case reflect.Int, reflect.Int64: // an int or a site.Duration
				f.SetInt(f.Int() + int64(time.Second))
			case reflect.Slice:
				f.Set(reflect.ValueOf(append(slices.Clone(f.Interface().([]string)), "added")))
			case reflect.Pointer: // a new pointer to another value, never a write through the shared one
				n := 1
				if !f.IsNil() {
					n += int(f.Elem().Int())
				}
				f.Set(reflect.ValueOf(&n))
			default:
				t.Fatalf("%s: cannot change a %s", o.Type().FieldByIndex(path).Name, f.Type())
			}
			what := fmt.Sprintf("%s.%s", cv.Type().Field(k).Name, o.Type().FieldByIndex(path).Name)
			if got := site.Diff(c, desired); got.Empty() && !site.DiffReflect(c, desired).Empty() {
				t.Errorf("%s changed: Diff sees no change", what)
			}
			wantSameDiff(t, what, c, desired)
		}
	}
	t.Run("nil and empty lists differ", func(t *testing.T) {
		desired := copyLists(c)
		desired.Users[0].Groups = []string{}
		desired.Entitlements[0].Resources = []string{}
		wantSameDiff(t, "empty lists", c, desired)
	})
}

// leafFields returns the index paths of t's configuration fields (not
// those tagged yaml:"-"), those of nested
// structs field by field.
func leafFields(t reflect.Type, prefix []int) [][]int {
	var out [][]int
	for i := range t.NumField() {
		path := append(slices.Clone(prefix), i)
		if f := t.Field(i); f.Tag.Get("yaml") == "-" {
			continue // not configuration (site.User.Directory)
		} else if f.Type.Kind() == reflect.Struct {
			out = append(out, leafFields(f.Type, path)...)
		} else {
			out = append(out, path)
		}
	}
	return out
}

// copyLists copies c's lists of objects, as site.MutateFrom does; the
// objects share their own lists with c's, which change and poke replace
// and never write into.
func copyLists(c *site.Config) *site.Config {
	out := *c
	v := reflect.ValueOf(&out).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && !f.IsNil() {
			f.Set(reflect.AppendSlice(reflect.MakeSlice(f.Type(), 0, f.Len()), f))
		}
	}
	return &out
}

// change makes one random change to c: the settings, the directory, or one object of a
// random kind created (a copy of another under a new name), updated (one
// field) or deleted. It describes the change.
func change(rng *rand.Rand, c *site.Config, run int) string {
	cv := reflect.ValueOf(c).Elem()
	k := rng.IntN(cv.NumField())
	if f := cv.Field(k); f.Kind() == reflect.Struct { // Settings, Directory
		poke(rng, f)
		return cv.Type().Field(k).Name
	}
	list := cv.Field(k)
	kind := cv.Type().Field(k).Name
	if list.Len() == 0 {
		return kind + ": none"
	}
	i := rng.IntN(list.Len())
	switch rng.IntN(3) {
	case 0:
		o := reflect.New(list.Type().Elem()).Elem()
		o.Set(list.Index(i))
		name := fmt.Sprintf("new-%d-%d", run, rng.IntN(1000))
		o.FieldByName("Name").SetString(name)
		if rng.IntN(2) == 0 {
			pokeField(rng, o)
		}
		list.Set(reflect.Append(list, o))
		return fmt.Sprintf("%s: create %s", kind, name)
	case 1:
		field := pokeField(rng, list.Index(i))
		return fmt.Sprintf("%s: update %s.%s", kind, list.Index(i).FieldByName("Name"), field)
	default:
		name := list.Index(i).FieldByName("Name").String()
		list.Set(reflect.AppendSlice(list.Slice(0, i), list.Slice(i+1, list.Len())))
		return fmt.Sprintf("%s: delete %s", kind, name)
	}
}

// pokeField changes one random field of the object o, and names it.
func pokeField(rng *rand.Rand, o reflect.Value) string {
	paths := leafFields(o.Type(), nil)
	path := paths[rng.IntN(len(paths))]
	poke(rng, o.FieldByIndex(path))
	return o.Type().FieldByIndex(path).Name
}

// poke changes v: a string gets longer or empty, a bool flips, an int
// moves, a list is replaced by a longer, a shorter or a nil one. It
// never writes into a list.
func poke(rng *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.Len() > 0 && rng.IntN(3) == 0 {
			v.SetString("")
		} else {
			v.SetString(v.String() + "x")
		}
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1 + int64(rng.IntN(3)))
	case reflect.Slice:
		old := v.Interface().([]string)
		switch {
		case len(old) > 0 && rng.IntN(3) == 0:
			v.Set(reflect.ValueOf(slices.Clone(old[1:])))
		case rng.IntN(5) == 0:
			v.Set(reflect.Zero(v.Type()))
		default:
			v.Set(reflect.ValueOf(append(slices.Clone(old), fmt.Sprintf("added-%d", rng.IntN(100)))))
		}
	case reflect.Struct:
		poke(rng, v.Field(rng.IntN(v.NumField())))
	default:
		panic(fmt.Sprintf("poke %s", v.Type()))
	}
}

func BenchmarkDiffLarge(b *testing.B) {
	current := sitegen.Generate(sitegen.LargeSize, testHash)
	desired := copyLists(current)
	desired.Applications = append(desired.Applications, site.Resource{Kind: site.Application, Name: "new-app",
		DisplayName: "New", CommandLine: `C:\new.exe`, DeliveryGroups: []string{"dg-01"}})
	desired.Normalize()
	b.Run("Diff", func(b *testing.B) {
		for b.Loop() {
			site.Diff(current, desired)
		}
	})
	b.Run("reference", func(b *testing.B) {
		for b.Loop() {
			site.DiffReflect(current, desired)
		}
	})
}
