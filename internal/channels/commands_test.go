package channels

import "testing"

// A chat command is a whole message: "/stop", any case, perhaps addressed
// "/stop@bot"; anything else, or more text, is no command.
func TestCommandOf(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"/stop":            "stop",
		"  /STOP \n":       "stop",
		"/stop@my_bot":     "stop",
		"/new":             "new",
		"/status":          "status",
		"/help":            "help",
		"/stop now please": "",
		"stop":             "",
		"/start":           "",
		"please /stop":     "",
		"":                 "",
		"/":                "",
	} {
		if got := CommandOf(text); got != want {
			t.Errorf("CommandOf(%q) = %q, want %q", text, got, want)
		}
	}
}
