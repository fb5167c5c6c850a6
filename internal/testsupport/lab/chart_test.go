package lab

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

func ms(v ...float64) Sample {
	s := make(Sample, len(v))
	for i, x := range v {
		s[i] = time.Duration(x * float64(time.Millisecond))
	}
	return s
}

func TestPaired(t *testing.T) {
	tests := []struct {
		name    string
		a, b    Sample
		want    Sample
		wantErr bool
	}{
		{"differences per pair", ms(1, 2, 3), ms(4, 2, 10), ms(3, 0, 7), false},
		{"negative differences kept", ms(5), ms(3), ms(-2), false},
		{"sizes differ", ms(1, 2), ms(1), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Paired(tc.a, tc.b)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("pair %d: got %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// The p50 of paired differences is not the difference of the p50s: the
// bench reports the former.
func TestPairedMedianIsNotDifferenceOfMedians(t *testing.T) {
	a, b := ms(1, 10, 100), ms(2, 30, 101)
	d, err := Paired(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, naive := d.P50(), b.P50()-a.P50(); got == naive {
		t.Fatalf("p50 of differences %v equals difference of p50s %v; the fixture should tell them apart", got, naive)
	}
	if got := d.P50(); got != 1*time.Millisecond {
		t.Errorf("p50 of differences = %v, want 1ms", got)
	}
}

func TestBoxOf(t *testing.T) {
	s := make(Sample, 100)
	for i := range s {
		s[i] = time.Duration(100-i) * time.Millisecond // unsorted on purpose
	}
	got := BoxOf(s)
	want := Box{P1: 1 * time.Millisecond, P25: 25 * time.Millisecond, P50: 50 * time.Millisecond, P75: 75 * time.Millisecond, P99: 99 * time.Millisecond}
	if got != want {
		t.Errorf("BoxOf = %+v, want %+v", got, want)
	}
}

// The chart is well-formed SVG with one group per distribution, labels
// escaped, and a box only where there are samples.
func TestWriteSVG(t *testing.T) {
	tests := []struct {
		name      string
		ds        []Dist
		wantGroup int
		wantRects int // background + one per non-empty distribution
	}{
		{"none", nil, 0, 1},
		{"two variants", []Dist{
			{Figure: "1 turn", Variant: "in-process loop", Sample: ms(1, 2, 3)},
			{Figure: "1 turn", Variant: "durable <tuned> & co", Sample: ms(10, 20, 300)},
		}, 2, 3},
		{"an empty one", []Dist{
			{Figure: "1 turn", Variant: "floor", Sample: ms(5, 6)},
			{Figure: "1 turn", Variant: "skipped"},
		}, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSVG(&buf, "bench <test>", tc.ds); err != nil {
				t.Fatal(err)
			}
			groups, rects := 0, 0
			dec := xml.NewDecoder(&buf)
			for {
				tok, err := dec.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("not well-formed XML: %v", err)
				}
				if se, ok := tok.(xml.StartElement); ok {
					switch se.Name.Local {
					case "g":
						groups++
					case "rect":
						rects++
					}
				}
			}
			if groups != tc.wantGroup || rects != tc.wantRects {
				t.Errorf("%d groups, %d rects; want %d, %d", groups, rects, tc.wantGroup, tc.wantRects)
			}
		})
	}
	var buf bytes.Buffer
	_ = WriteSVG(&buf, "t", []Dist{{Figure: "f", Variant: "a<b", Sample: ms(1)}})
	if !strings.Contains(buf.String(), "a&lt;b") {
		t.Errorf("label not escaped: %s", buf.String())
	}
}
