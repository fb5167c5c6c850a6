package github

import (
	"encoding/json"
	"fmt"
	"strings"

	gh "github.com/google/go-github/v75/github"
)

// Event is a verified webhook event as policies see it: a small view of
// the payload (the template fields) plus its raw JSON for an executable
// policy.
type Event struct {
	// Name is the X-GitHub-Event value ("issue_comment").
	Name   string
	Action string
	// Repo is "owner/name".
	Repo   string
	Number int
	Title  string
	// Body is the issue's or pull request's body.
	Body string
	// Comment is the comment's (or review's) body on comment and review
	// events.
	Comment string
	Sender  string
	// SenderType is "User", "Bot" or "Organization".
	SenderType string
	// Association is the author association of the comment, review,
	// issue or pull request (OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, …).
	Association string
	// URL is the HTML URL of the comment, or else the issue or PR.
	URL    string
	Labels []string
	// Label is the label added or removed (labeled, unlabeled).
	Label string
	// PR is set when the event is about a pull request.
	PR           bool
	Installation int64
	Raw          json.RawMessage
}

// Events is what the declarative rules know about: event name → actions.
var knownActions = map[string][]string{
	"issues": {"opened", "edited", "deleted", "closed", "reopened", "labeled", "unlabeled", "assigned", "unassigned",
		"transferred", "pinned", "unpinned", "locked", "unlocked", "milestoned", "demilestoned", "typed", "untyped"},
	"issue_comment": {"created", "edited", "deleted"},
	"pull_request": {"opened", "edited", "closed", "reopened", "synchronize", "labeled", "unlabeled", "assigned",
		"unassigned", "review_requested", "review_request_removed", "ready_for_review", "converted_to_draft",
		"locked", "unlocked", "auto_merge_enabled", "auto_merge_disabled", "enqueued", "dequeued", "milestoned", "demilestoned"},
	"pull_request_review":         {"submitted", "edited", "dismissed"},
	"pull_request_review_comment": {"created", "edited", "deleted"},
}

// NewEvent reads a webhook payload of event name. The five events rules
// know (issues, issue_comment, pull_request, pull_request_review,
// pull_request_review_comment) are read with go-github's types; any other
// gets the common fields (action, repository, sender, installation).
func NewEvent(name string, payload []byte) (*Event, error) {
	if !json.Valid(payload) {
		return nil, fmt.Errorf("github: parse %s: payload is not JSON", name)
	}
	ev := &Event{Name: name, Raw: json.RawMessage(payload)}
	if _, known := knownActions[name]; !known {
		var c struct {
			Action     string `json:"action"`
			Repository struct {
				FullName string `json:"full_name"`
			} `json:"repository"`
			Sender struct {
				Login string `json:"login"`
				Type  string `json:"type"`
			} `json:"sender"`
			Installation struct {
				ID int64 `json:"id"`
			} `json:"installation"`
		}
		if err := json.Unmarshal(payload, &c); err != nil {
			return nil, fmt.Errorf("github: parse %s: %w", name, err)
		}
		ev.Action, ev.Repo, ev.Sender, ev.SenderType, ev.Installation = c.Action, c.Repository.FullName, c.Sender.Login, c.Sender.Type, c.Installation.ID
		return ev, nil
	}
	p, err := gh.ParseWebHook(name, payload)
	if err != nil {
		return nil, fmt.Errorf("github: parse %s: %w", name, err)
	}
	switch e := p.(type) {
	case *gh.IssuesEvent:
		ev.common(e.GetAction(), e.GetRepo(), e.GetSender(), e.GetInstallation())
		ev.issue(e.GetIssue())
		ev.Label = e.GetLabel().GetName()
	case *gh.IssueCommentEvent:
		ev.common(e.GetAction(), e.GetRepo(), e.GetSender(), e.GetInstallation())
		ev.issue(e.GetIssue())
		ev.Comment, ev.Association, ev.URL = e.GetComment().GetBody(), e.GetComment().GetAuthorAssociation(), e.GetComment().GetHTMLURL()
	case *gh.PullRequestEvent:
		ev.common(e.GetAction(), e.GetRepo(), e.GetSender(), e.GetInstallation())
		ev.pull(e.GetPullRequest())
		if ev.Number == 0 {
			ev.Number = e.GetNumber()
		}
		ev.Label = e.GetLabel().GetName()
	case *gh.PullRequestReviewEvent:
		ev.common(e.GetAction(), e.GetRepo(), e.GetSender(), e.GetInstallation())
		ev.pull(e.GetPullRequest())
		ev.Comment, ev.Association, ev.URL = e.GetReview().GetBody(), e.GetReview().GetAuthorAssociation(), e.GetReview().GetHTMLURL()
	case *gh.PullRequestReviewCommentEvent:
		ev.common(e.GetAction(), e.GetRepo(), e.GetSender(), e.GetInstallation())
		ev.pull(e.GetPullRequest())
		ev.Comment, ev.Association, ev.URL = e.GetComment().GetBody(), e.GetComment().GetAuthorAssociation(), e.GetComment().GetHTMLURL()
	}
	return ev, nil
}

func (ev *Event) common(action string, repo *gh.Repository, sender *gh.User, inst *gh.Installation) {
	ev.Action, ev.Repo, ev.Sender, ev.SenderType, ev.Installation = action, repo.GetFullName(), sender.GetLogin(), sender.GetType(), inst.GetID()
}

func (ev *Event) issue(is *gh.Issue) {
	ev.Number, ev.Title, ev.Body, ev.URL, ev.Association = is.GetNumber(), is.GetTitle(), is.GetBody(), is.GetHTMLURL(), is.GetAuthorAssociation()
	ev.PR = is.IsPullRequest()
	for _, l := range is.Labels {
		ev.Labels = append(ev.Labels, l.GetName())
	}
}

func (ev *Event) pull(pr *gh.PullRequest) {
	ev.Number, ev.Title, ev.Body, ev.URL, ev.Association = pr.GetNumber(), pr.GetTitle(), pr.GetBody(), pr.GetHTMLURL(), pr.GetAuthorAssociation()
	ev.PR = true
	for _, l := range pr.Labels {
		ev.Labels = append(ev.Labels, l.GetName())
	}
}

// View is the event as templates and executable policies see it. Keys:
// event, action, repo, owner, name, number, title, body, comment, sender,
// association, url, labels, label, pr.
func (ev *Event) View() map[string]any {
	owner, name, _ := strings.Cut(ev.Repo, "/")
	labels := ev.Labels
	if labels == nil {
		labels = []string{}
	}
	return map[string]any{
		"event": ev.Name, "action": ev.Action, "repo": ev.Repo, "owner": owner, "name": name,
		"number": ev.Number, "title": ev.Title, "body": ev.Body, "comment": ev.Comment,
		"sender": ev.Sender, "association": ev.Association, "url": ev.URL, "labels": labels,
		"label": ev.Label, "pr": ev.PR,
	}
}

// text is what a mention is looked for in: the comment, else the body.
func (ev *Event) text() string {
	if ev.Comment != "" {
		return ev.Comment
	}
	return ev.Body
}

// skip reports events the agent caused itself: sent by bot, or carrying a
// reply, approval or question marker (a comment the channel posted).
func (ev *Event) skip(bot string) bool {
	if bot != "" {
		b := strings.TrimSuffix(strings.ToLower(bot), "[bot]")
		if s := strings.TrimSuffix(strings.ToLower(ev.Sender), "[bot]"); s == b {
			return true
		}
	}
	return strings.Contains(ev.Comment, markerPrefix) || strings.Contains(ev.Comment, approvalMarker) ||
		strings.Contains(ev.Comment, questionMarker) ||
		(ev.Comment == "" && strings.Contains(ev.Body, markerPrefix))
}
