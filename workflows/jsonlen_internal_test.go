package workflows

import (
	"encoding/json"
	"testing"
)

// jsonLen counts what encoding/json writes for a string, or more (it
// counts \b and \f as six bytes), never less.
func TestJSONLen(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain key", `"quoted" \ back`, "<p>a&amp;b</p>", "tab\tline\nret\r", "\x01\x1f\x7f",
		"\b\f", "naïve 日本 🎉", "\u2028\u2029", "bad \xff\xfe utf-8", "hook:orders:msg_1@lz3k"} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got := jsonLen(s)
		if got < len(b) || (got != len(b) && s != "\b\f") {
			t.Errorf("jsonLen(%q) = %d, encoding/json writes %d", s, got, len(b))
		}
	}
}
