package github

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	gh "github.com/google/go-github/v75/github"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/tools"
)

// maxFileComment bounds the text of a file send_file posts as a comment
// (GitHub's comment limit, less the heading and the fence).
const maxFileComment = MaxComment - 1024

// Deliver implements delivery.Sender: the message is a comment on the
// issue or pull request "owner/repo#12", carrying a hidden marker with the
// send's identity like a reply's parts, so a retry finds a comment an
// earlier attempt posted (among the issue's recent comments) instead of
// posting it again. A file is posted as a comment holding its text in a
// code block: GitHub's API takes no attachments, so a file that is not
// UTF-8 text (or is longer than a comment holds) is refused, saying so.
// With a GitHub App the repository's installation is looked up.
func (r *Replier) Deliver(ctx context.Context, req delivery.Request) (string, error) {
	owner, repo, number, ok := delivery.GitHubIssue(req.Dest)
	if !ok {
		return "", delivery.Permanent(fmt.Errorf("github: %q is not owner/repo#number", req.Dest))
	}
	text := req.Text
	if f := req.File; f != nil {
		if !utf8.Valid(f.Data) || strings.ContainsRune(string(f.Data), 0) {
			return "", delivery.Permanent(fmt.Errorf("github: %s is not a text file, and GitHub comments take no attachments: "+
				"put it where people can download it and send a link instead", f.Name))
		}
		if utf16Len(string(f.Data)) > maxFileComment {
			return "", delivery.Permanent(fmt.Errorf("github: %s is %s, more than one comment holds: send a link to it instead",
				f.Name, tools.FormatSize(len(f.Data))))
		}
		fence := "```"
		for strings.Contains(string(f.Data), fence) {
			fence += "`"
		}
		text = fmt.Sprintf("**%s** (%s)\n\n%s\n%s\n%s", f.Name, tools.FormatSize(len(f.Data)), fence,
			strings.TrimSuffix(string(f.Data), "\n"), fence)
	}
	c, err := r.repoClient(ctx, owner, repo)
	if err != nil {
		return "", permanent(err)
	}
	rd := &render{api: c, owner: owner, repo: repo, number: number, key: req.Mark, limit: r.Limit}
	if err := rd.Finish(ctx, text); err != nil {
		return "", permanent(err)
	}
	return owner + "/" + repo + "#" + strconv.Itoa(number) + "/" + rd.Ref(), nil
}

// repoClient is the token's client, or the client of the GitHub App's
// installation on owner/repo.
func (r *Replier) repoClient(ctx context.Context, owner, repo string) (*gh.Client, error) {
	if r.token != nil {
		return r.token, nil
	}
	app := r.client(&http.Client{Transport: r.apps, Timeout: time.Minute})
	inst, _, err := app.Apps.FindRepositoryInstallation(ctx, owner, repo)
	if err != nil {
		return nil, fmt.Errorf("github: the App's installation on %s/%s: %w", owner, repo, classify(err))
	}
	return r.clientFor(inst.GetID())
}

// permanent carries the channel's permanent mark over to delivery's.
func permanent(err error) error {
	if channels.IsPermanent(err) {
		return delivery.Permanent(err)
	}
	return err
}
