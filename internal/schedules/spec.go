// Package schedules turns an agent's schedules/<name>.yaml files into
// Temporal Schedules (ID "schedule:<name>") and runs their fires. Reconcile
// creates, updates and deletes the schedules a workspace owns; each
// occurrence starts a workflows.ScheduleFireWorkflow whose Schedule.Fire
// activity (Firer) runs one turn in session "schedule:<name>" through the
// durable agent. Trigger, Describe, List and History read everything back
// from Temporal itself: there is no side file.
package schedules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
	_ "time/tzdata" // schedules name IANA zones; do not depend on the host's zoneinfo

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/internal/delivery"
)

// Dir is the folder of an agent dir that holds schedule files.
const Dir = "schedules"

// DisabledSuffix turns a schedule file off (daily.yaml.disabled or
// daily.disabled): its
// Temporal Schedule is deleted at the next reconcile.
const DisabledSuffix = ".disabled"

// MaxPromptBytes bounds a schedule's prompt, which travels in the schedule's
// action and every fire's history.
const MaxPromptBytes = 64 << 10

// Spec is one schedule file.
type Spec struct {
	// Name is the file name without extension; the schedule's ID is
	// "schedule:<Name>" and its session "schedule:<Name>".
	Name string `yaml:"-"`
	// File is the path the spec was read from.
	File string `yaml:"-"`
	// Cron is a standard 5-field cron expression (minute hour day-of-month
	// month day-of-week).
	Cron string `yaml:"cron"`
	// TZ is an IANA time zone; default UTC.
	TZ string `yaml:"tz"`
	// Prompt is the text of the turn each fire runs.
	Prompt string `yaml:"prompt"`
	// Deliver are the targets ("slack:#ops", delivery.ParseTarget) each
	// completed fire's answer is sent to, once each: one target or a list.
	Deliver Targets `yaml:"deliver"`
}

// Targets is deliver:'s value: one target or a list of them.
type Targets []string

// UnmarshalYAML implements yaml.Unmarshaler: a string or a list.
func (t *Targets) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var one string
		if err := n.Decode(&one); err != nil {
			return err
		}
		*t = Targets{one}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return fmt.Errorf("deliver: want a target such as slack:#ops, or a list of them")
	}
	*t = list
	return nil
}

// FileError is a schedule file that cannot be used; it names the file.
type FileError struct {
	File   string
	Reason string
}

func (e *FileError) Error() string { return e.File + ": " + e.Reason }

// Files lists a schedules folder: the enabled specs, the names of disabled
// files, and notes about files that were ignored.
type Files struct {
	Specs    []Spec
	Disabled []string
	Ignored  []string
}

// ForAgent names the schedules of f as those of agent ("<agent>/<name>");
// "" (the main agent) leaves them.
func (f *Files) ForAgent(agent string) {
	if agent == "" {
		return
	}
	for i := range f.Specs {
		f.Specs[i].Name = agent + "/" + f.Specs[i].Name
	}
	for i := range f.Disabled {
		f.Disabled[i] = agent + "/" + f.Disabled[i]
	}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// LoadDir reads <agentDir>/schedules. A missing folder is no schedules.
// Every bad file is reported (errors joined, each naming the file, most a
// *FileError); nothing is returned for use then.
func LoadDir(agentDir string) (Files, error) {
	var out Files
	dir := filepath.Join(agentDir, Dir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("schedules: %w", err)
	}
	var errs []error
	seen := map[string]string{}
	for _, e := range entries {
		fn := e.Name()
		path := filepath.Join(dir, fn)
		if strings.HasPrefix(fn, ".") || e.IsDir() {
			continue
		}
		if base, ok := strings.CutSuffix(fn, DisabledSuffix); ok {
			// daily.yaml.disabled or daily.disabled
			name, ok := scheduleName(base)
			if !ok && nameRE.MatchString(base) {
				name, ok = base, true
			}
			if ok {
				out.Disabled = append(out.Disabled, name)
			}
			continue
		}
		name, ok := scheduleName(fn)
		if !ok {
			if ext := filepath.Ext(fn); ext == ".yaml" || ext == ".yml" {
				errs = append(errs, &FileError{File: path, Reason: "the name must start with a letter or digit and use only letters, digits, '.', '_' and '-' (it becomes the schedule ID schedule:<name>)"})
			} else {
				out.Ignored = append(out.Ignored, path+": not a schedule file (want <name>.yaml)")
			}
			continue
		}
		if prev, dup := seen[name]; dup {
			errs = append(errs, &FileError{File: path, Reason: fmt.Sprintf("schedule %q is also defined by %s; keep one of them", name, prev)})
			continue
		}
		seen[name] = path
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		s, err := Parse(path, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.Name = name
		out.Specs = append(out.Specs, s)
	}
	if len(errs) > 0 {
		return Files{}, fmt.Errorf("schedules: %w", errors.Join(errs...))
	}
	sort.Slice(out.Specs, func(i, j int) bool { return out.Specs[i].Name < out.Specs[j].Name })
	sort.Strings(out.Disabled)
	return out, nil
}

// ValidName reports whether name can name a schedule (and so appear in its
// ID and in visibility queries).
func ValidName(name string) bool { return nameRE.MatchString(name) }

// scheduleName returns the schedule name of a file name ending in .yaml or .yml.
func scheduleName(fn string) (string, bool) {
	for _, ext := range []string{".yaml", ".yml"} {
		if base, ok := strings.CutSuffix(fn, ext); ok {
			return base, nameRE.MatchString(base)
		}
	}
	return "", false
}

// Parse parses and validates one schedule file's content. Errors are
// *FileError values naming file.
func Parse(file string, b []byte) (Spec, error) {
	fail := func(format string, args ...any) (Spec, error) {
		return Spec{}, &FileError{File: file, Reason: fmt.Sprintf(format, args...)}
	}
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return fail("the file is empty; want cron, tz and prompt, e.g.\n  cron: \"0 9 * * 1-5\"\n  tz: Europe/Berlin\n  prompt: Summarize yesterday's issues.")
		}
		return fail("%s (keys: cron, tz, prompt, deliver)", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	s.File = file
	s.Cron = strings.TrimSpace(s.Cron)
	s.TZ = strings.TrimSpace(s.TZ)
	if s.TZ == "" {
		s.TZ = "UTC"
	}
	if strings.TrimSpace(s.Prompt) == "" {
		return fail("prompt is required: the text of the turn each fire runs")
	}
	if len(s.Prompt) > MaxPromptBytes {
		return fail("prompt is %d bytes, more than %d; keep the prompt short and put long instructions in a skill", len(s.Prompt), MaxPromptBytes)
	}
	if s.Cron == "" {
		return fail("cron is required: 5 fields, minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\"")
	}
	var problems []string
	seen := map[string]bool{}
	for i, d := range s.Deliver {
		t, err := delivery.ParseTarget(d)
		if err != nil {
			problems = append(problems, "deliver: "+err.Error())
			continue
		}
		if seen[t.String()] {
			problems = append(problems, fmt.Sprintf("deliver: %s is listed twice", t))
		}
		seen[t.String()] = true
		s.Deliver[i] = t.String()
	}
	if _, err := ParseCron(s.Cron, "UTC"); err != nil {
		problems = append(problems, err.Error())
	}
	if _, err := Location(s.TZ); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return fail("%s", strings.Join(problems, "; "))
	}
	return s, nil
}

// Location loads an IANA time zone; "Local" is refused because a server's
// local zone is not the author's.
func Location(tz string) (*time.Location, error) {
	if tz == "Local" || strings.HasPrefix(tz, "TZ=") {
		return nil, fmt.Errorf("tz %q: name an IANA time zone such as UTC, Europe/Berlin or America/New_York", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("tz %q is not a known IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)", tz)
	}
	return loc, nil
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// ParseCron parses a 5-field cron expression in time zone tz.
//
// Both day fields restricted at once ("0 9 1 * MON") is refused: classic cron
// fires when either matches, Temporal when both do, and a schedule must mean
// one thing.
func ParseCron(expr, tz string) (cron.Schedule, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, fmt.Errorf("cron %q: put the time zone in the tz key, not in the expression", expr)
	}
	if strings.HasPrefix(expr, "@") {
		return nil, fmt.Errorf("cron %q: descriptors are not supported; write 5 fields, e.g. \"0 0 * * *\" for @daily", expr)
	}
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return nil, fmt.Errorf("cron %q has %d fields, want 5: minute hour day-of-month month day-of-week (e.g. \"0 9 * * 1-5\")", expr, len(fields))
	}
	if restricted(fields[2]) && restricted(fields[4]) {
		return nil, fmt.Errorf("cron %q restricts both day-of-month and day-of-week, which cron and Temporal read differently; keep one of them \"*\" (or use two schedule files)", expr)
	}
	loc, err := Location(tz)
	if err != nil {
		return nil, err
	}
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w", expr, err)
	}
	if spec, ok := sched.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	if sched.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("cron %q never fires (check the day and month)", expr)
	}
	return sched, nil
}

func restricted(field string) bool { return field != "*" && field != "?" }
