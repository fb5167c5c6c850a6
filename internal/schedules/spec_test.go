package schedules

import (
	"context"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		want    Spec
		wantErr string // substring; "" = valid
	}{
		{name: "full", yaml: "cron: \"0 9 * * 1-5\"\ntz: Europe/Berlin\nprompt: Summarize the inbox.\n",
			want: Spec{Cron: "0 9 * * 1-5", TZ: "Europe/Berlin", Prompt: "Summarize the inbox."}},
		{name: "deliver one target", yaml: "cron: '0 9 * * *'\nprompt: x\ndeliver: slack:#Ops\n",
			want: Spec{Cron: "0 9 * * *", TZ: "UTC", Prompt: "x", Deliver: Targets{"slack:#ops"}}},
		{name: "deliver a list", yaml: "cron: '0 9 * * *'\nprompt: x\ndeliver: [\"slack:C0123ABCD\", \"telegram:-100123\"]\n",
			want: Spec{Cron: "0 9 * * *", TZ: "UTC", Prompt: "x", Deliver: Targets{"slack:C0123ABCD", "telegram:-100123"}}},
		{name: "deliver a bad target", yaml: "cron: '0 9 * * *'\nprompt: x\ndeliver: email:me@example.com\n", wantErr: `deliver: "email:me@example.com": unknown kind`},
		{name: "deliver twice", yaml: "cron: '0 9 * * *'\nprompt: x\ndeliver: [slack:#ops, \"slack:#OPS\"]\n", wantErr: "slack:#ops is listed twice"},
		{name: "deliver not a list", yaml: "cron: '0 9 * * *'\nprompt: x\ndeliver: {slack: ops}\n", wantErr: "deliver: want a target"},
		{name: "tz defaults to UTC", yaml: "cron: '*/15 * * * *'\nprompt: ping\n",
			want: Spec{Cron: "*/15 * * * *", TZ: "UTC", Prompt: "ping"}},
		{name: "names and block prompt", yaml: "cron: 30 7 * JAN-MAR mon\ntz: America/New_York\nprompt: |\n  line one\n  line two\n",
			want: Spec{Cron: "30 7 * JAN-MAR mon", TZ: "America/New_York", Prompt: "line one\nline two\n"}},
		{name: "six fields", yaml: "cron: '0 0 9 * * *'\nprompt: x\n", wantErr: "has 6 fields, want 5"},
		{name: "four fields", yaml: "cron: '0 9 * *'\nprompt: x\n", wantErr: "has 4 fields, want 5"},
		{name: "descriptor", yaml: "cron: '@daily'\nprompt: x\n", wantErr: "descriptors are not supported"},
		{name: "tz in cron", yaml: "cron: 'CRON_TZ=UTC 0 9 * * *'\nprompt: x\n", wantErr: "put the time zone in the tz key"},
		{name: "bad minute", yaml: "cron: '61 9 * * *'\nprompt: x\n", wantErr: "cron \"61 9 * * *\""},
		{name: "both day fields", yaml: "cron: '0 9 1 * MON'\nprompt: x\n", wantErr: "restricts both day-of-month and day-of-week"},
		{name: "never fires", yaml: "cron: '0 9 30 2 *'\nprompt: x\n", wantErr: "never fires"},
		{name: "unknown tz", yaml: "cron: '0 9 * * *'\ntz: Mars/Olympus\nprompt: x\n", wantErr: "tz \"Mars/Olympus\" is not a known IANA time zone"},
		{name: "local tz", yaml: "cron: '0 9 * * *'\ntz: Local\nprompt: x\n", wantErr: "name an IANA time zone"},
		{name: "missing cron", yaml: "prompt: x\n", wantErr: "cron is required"},
		{name: "missing prompt", yaml: "cron: '0 9 * * *'\n", wantErr: "prompt is required"},
		{name: "blank prompt", yaml: "cron: '0 9 * * *'\nprompt: '  '\n", wantErr: "prompt is required"},
		{name: "unknown key", yaml: "cron: '0 9 * * *'\nprompt: x\nsession: other\n", wantErr: "field session not found"},
		{name: "empty file", yaml: "", wantErr: "the file is empty"},
		{name: "not a mapping", yaml: "- a\n- b\n", wantErr: "keys: cron, tz, prompt"},
		{name: "huge prompt", yaml: "cron: '0 9 * * *'\nprompt: " + strings.Repeat("a", MaxPromptBytes+1) + "\n", wantErr: "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse("schedules/x.yaml", []byte(tt.yaml))
			if tt.wantErr != "" {
				var fe *FileError
				if err == nil || !errors.As(err, &fe) || fe.File != "schedules/x.yaml" {
					t.Fatalf("want a *FileError naming the file, got %v", err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q does not contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			tt.want.File = "schedules/x.yaml"
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, Dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	const ok = "cron: '0 9 * * *'\nprompt: hi\n"
	tests := []struct {
		name         string
		files        map[string]string
		wantSpecs    []string
		wantDisabled []string
		wantIgnored  int
		wantErr      []string
	}{
		{name: "no folder"},
		{name: "enabled, disabled and ignored",
			files: map[string]string{
				"daily.yaml": ok, "weekly.yml": ok, "old.yaml.disabled": ok, "gone.disabled": "",
				"README.md": "notes", ".daily.yaml.swp": "x", "sub/inner.yaml": ok,
			},
			wantSpecs: []string{"daily", "weekly"}, wantDisabled: []string{"gone", "old"}, wantIgnored: 1},
		{name: "every bad file is named",
			files: map[string]string{
				"a.yaml": "cron: '0 9 * *'\nprompt: x\n", "b.yaml": "cron: '0 9 * * *'\ntz: Nowhere/City\nprompt: x\n", "c.yaml": ok,
			},
			wantErr: []string{"a.yaml: cron", "b.yaml: tz"}},
		{name: "same name twice", files: map[string]string{"d.yaml": ok, "d.yml": ok}, wantErr: []string{"also defined by"}},
		{name: "bad name", files: map[string]string{"-x.yaml": ok}, wantErr: []string{"-x.yaml: the name must start"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := writeFiles(t, tt.files)
			got, err := LoadDir(dir)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("want an error, got %+v", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range got.Specs {
				names = append(names, s.Name)
				if !strings.HasPrefix(s.File, filepath.Join(dir, Dir)) {
					t.Errorf("spec %s: file %q not under the schedules folder", s.Name, s.File)
				}
			}
			if strings.Join(names, ",") != strings.Join(tt.wantSpecs, ",") {
				t.Errorf("specs = %v, want %v", names, tt.wantSpecs)
			}
			if strings.Join(got.Disabled, ",") != strings.Join(tt.wantDisabled, ",") {
				t.Errorf("disabled = %v, want %v", got.Disabled, tt.wantDisabled)
			}
			if len(got.Ignored) != tt.wantIgnored {
				t.Errorf("ignored = %v, want %d", got.Ignored, tt.wantIgnored)
			}
		})
	}
}

func TestDigest(t *testing.T) {
	t.Parallel()
	base := Spec{Name: "d", Cron: "0 9 * * *", TZ: "UTC", Prompt: "hi"}
	d := Digest(base, "q")
	if Digest(base, "q") != d {
		t.Fatal("digest is not stable")
	}
	for name, s := range map[string]Spec{
		"cron":   {Cron: "0 10 * * *", TZ: "UTC", Prompt: "hi"},
		"tz":     {Cron: "0 9 * * *", TZ: "Europe/Paris", Prompt: "hi"},
		"prompt": {Cron: "0 9 * * *", TZ: "UTC", Prompt: "hello"},
	} {
		if Digest(s, "q") == d {
			t.Errorf("changing %s does not change the digest", name)
		}
	}
	if Digest(base, "other") == d {
		t.Error("changing the task queue does not change the digest")
	}
}

// scripted is an agent that answers every turn with its text and counts turns.
type scripted struct {
	turns int
	keys  []string
}

func (s *scripted) Invoke(ctx context.Context, _ agent.Scope, _ agent.Prompt) iter.Seq[agent.Event] {
	s.turns++
	s.keys = append(s.keys, agent.IdempotencyKey(ctx))
	return func(yield func(agent.Event) bool) {
		if yield(agent.Event{Type: agent.TypeText, Delta: "done"}) {
			yield(agent.Completed(nil))
		}
	}
}

func TestRunAndSuperseded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		name    string
		nominal time.Time
		cron    string
		wantRun bool
	}{
		{name: "triggered by hand (no nominal time)", wantRun: true, cron: "0 9 * * *"},
		{name: "the latest occurrence", nominal: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC), cron: "0 9 * * *", wantRun: true},
		// Without a client there is no way to see a later fire: an overdue
		// fire is the single catch-up and runs.
		{name: "overdue, nothing later started", nominal: time.Date(2026, 2, 27, 9, 0, 0, 0, time.UTC), cron: "0 9 * * *", wantRun: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &scripted{}
			f := &Firer{Agent: a, Now: func() time.Time { return now }}
			req := wire.FireRequest{
				Name: "daily", Prompt: "hi", Cron: tt.cron, TZ: "UTC",
				Key: "schedule-fire:daily-x", Nominal: tt.nominal, FiredAt: now.Add(-time.Second),
			}
			rec, err := f.Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantRun {
				if rec.Outcome != workflows.FireCompleted || rec.Reply != "done" || a.turns != 1 || a.keys[0] != req.Key {
					t.Fatalf("want one completed turn under the fire's key, got %+v (turns %d, keys %v)", rec, a.turns, a.keys)
				}
				if rec.Session != "schedule:daily" || rec.Ms != 1000 || !rec.FiredAt.Equal(req.FiredAt) {
					t.Errorf("record = %+v", rec)
				}
			}
		})
	}
}

// failing answers every turn with a failed terminal.
type failing struct{}

func (failing) Invoke(context.Context, agent.Scope, agent.Prompt) iter.Seq[agent.Event] {
	return func(yield func(agent.Event) bool) {
		yield(agent.Failed("model said 401: check OPENAI_API_KEY", false, ""))
	}
}

func TestRunFailedTurnIsARecord(t *testing.T) {
	t.Parallel()
	rec, err := (&Firer{Agent: failing{}}).Run(context.Background(), wire.FireRequest{
		Name: "x", Prompt: "p", Key: "k",
	})
	if err != nil || rec.Outcome != workflows.FireFailed || !strings.Contains(rec.Error, "OPENAI_API_KEY") || rec.Reply != "" {
		t.Fatalf("want a failed record carrying the details, got %+v, %v", rec, err)
	}
}

func TestRunInvalidRequest(t *testing.T) {
	t.Parallel()
	a := &scripted{}
	rec, err := (&Firer{Agent: a}).Run(context.Background(), wire.FireRequest{Name: "x"})
	if err != nil || rec.Outcome != workflows.FireFailed || a.turns != 0 {
		t.Fatalf("want a failed record and no turn, got %+v, %v, %d turns", rec, err, a.turns)
	}
}
