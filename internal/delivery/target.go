// Package delivery sends an agent's words (and files) to places people
// look: a Slack channel, a Feishu/Lark chat, a Telegram chat, a GitHub
// issue. The send_message and send_file tools and a schedule's deliver:
// list use it.
//
// A target is "<kind>:<destination>" (ParseTarget); fastagent.yaml's
// delivery.allow lists the targets the tools may send to (Allowed). Each
// channel's replier sends through Sender, under a key that derives from
// where the send was asked for — the tool call's session and result entry,
// or the schedule fire and its target — so a retried activity or a
// replayed workflow sends nothing twice: the platform's reference is kept
// in the session store under the key, and each channel finds a send an
// earlier attempt made but could not record (Slack: message metadata and
// file shares; Feishu/Lark: the message uuid; GitHub: a hidden marker).
package delivery

import (
	"fmt"
	"regexp"
	"strings"
)

// Channel kinds a target may name.
const (
	KindSlack    = "slack"
	KindFeishu   = "feishu"
	KindLark     = "lark"
	KindTelegram = "telegram"
	KindGitHub   = "github"
)

// Kinds are the kinds a target may name, in the order errors list them.
var Kinds = []string{KindSlack, KindFeishu, KindLark, KindTelegram, KindGitHub}

// Target is a parsed "<kind>:<destination>".
type Target struct {
	Kind string
	// Dest is the destination in the kind's terms: "#ops", "C0123ABCD"
	// or "U0123ABCD" (Slack), "oc_…" or "ou_…" (Feishu/Lark), a chat ID
	// or "@channel" (Telegram), "owner/repo#12" (GitHub).
	Dest string
}

// String is the target as written: "<kind>:<dest>".
func (t Target) String() string { return t.Kind + ":" + t.Dest }

var (
	slackName   = regexp.MustCompile(`^#[a-z0-9][a-z0-9._-]{0,79}$`)
	slackID     = regexp.MustCompile(`^[CGDUW][A-Z0-9]{6,}$`)
	feishuID    = regexp.MustCompile(`^(oc|ou)_[A-Za-z0-9]{6,}$`)
	telegramID  = regexp.MustCompile(`^-?[0-9]{1,20}$`)
	telegramPub = regexp.MustCompile(`^@[A-Za-z][A-Za-z0-9_]{3,31}$`)
	githubIssue = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/([A-Za-z0-9._-]{1,100})#([1-9][0-9]{0,9})$`)
)

// forms says what each kind's destinations look like, for errors.
var forms = map[string]string{
	KindSlack:    "slack:#channel-name, slack:C… (a channel ID) or slack:U… (a user: a direct message)",
	KindFeishu:   "feishu:oc_… (a chat ID) or feishu:ou_… (a user's open_id)",
	KindLark:     "lark:oc_… (a chat ID) or lark:ou_… (a user's open_id)",
	KindTelegram: "telegram:<chat id> (e.g. telegram:-1001234567890) or telegram:@channelname",
	KindGitHub:   "github:owner/repo#12 (an issue or pull request)",
}

// ParseTarget reads "<kind>:<destination>". A Slack channel name is
// lower-cased (Slack's names are); anything else must be written as the
// platform spells it. The error says what the kind's targets look like.
func ParseTarget(s string) (Target, error) {
	s = strings.TrimSpace(s)
	kind, dest, ok := strings.Cut(s, ":")
	if !ok || kind == "" || dest == "" {
		return Target{}, fmt.Errorf("%q is not a target: write <kind>:<destination>, e.g. slack:#ops (kinds: %s)", s, strings.Join(Kinds, ", "))
	}
	kind = strings.ToLower(kind)
	form, known := forms[kind]
	if !known {
		return Target{}, fmt.Errorf("%q: unknown kind %q (kinds: %s)", s, kind, strings.Join(Kinds, ", "))
	}
	if kind == KindSlack && strings.HasPrefix(dest, "#") {
		dest = strings.ToLower(dest)
	}
	var valid bool
	switch kind {
	case KindSlack:
		valid = slackName.MatchString(dest) || slackID.MatchString(dest)
	case KindFeishu, KindLark:
		valid = feishuID.MatchString(dest)
	case KindTelegram:
		valid = telegramID.MatchString(dest) || telegramPub.MatchString(dest)
	case KindGitHub:
		valid = githubIssue.MatchString(dest)
	}
	if !valid {
		return Target{}, fmt.Errorf("%q is not a %s target: write %s", s, kind, form)
	}
	return Target{Kind: kind, Dest: dest}, nil
}

// GitHubIssue splits a GitHub destination "owner/repo#12".
func GitHubIssue(dest string) (owner, repo string, number int, ok bool) {
	m := githubIssue.FindStringSubmatch(dest)
	if m == nil {
		return "", "", 0, false
	}
	if _, err := fmt.Sscan(m[3], &number); err != nil {
		return "", "", 0, false
	}
	return m[1], m[2], number, true
}

// Wildcard is an allow entry's destination that allows every target of
// its kind ("telegram:*").
const Wildcard = "*"

// ParseAllow checks delivery.allow's entries: each is a target or
// "<kind>:*". It returns the entries normalized (kinds and Slack names
// lower-cased).
func ParseAllow(entries []string) ([]string, error) {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		kind, dest, _ := strings.Cut(strings.TrimSpace(e), ":")
		if dest == Wildcard {
			kind = strings.ToLower(kind)
			if _, known := forms[kind]; !known {
				return nil, fmt.Errorf("%q: unknown kind %q (kinds: %s)", e, kind, strings.Join(Kinds, ", "))
			}
			out = append(out, kind+":"+Wildcard)
			continue
		}
		t, err := ParseTarget(e)
		if err != nil {
			return nil, err
		}
		out = append(out, t.String())
	}
	return out, nil
}

// Allowed reports whether allow (ParseAllow's normalized entries) lets a
// send go to t: an entry naming t exactly, or "<kind>:*". A target is
// matched as written: "slack:#ops" does not allow "slack:C0123ABCD" even
// when that is the same channel.
func Allowed(allow []string, t Target) bool {
	for _, a := range allow {
		if a == t.String() || a == t.Kind+":"+Wildcard {
			return true
		}
	}
	return false
}
