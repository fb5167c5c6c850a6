package github

import (
	"fmt"
	"regexp"
	"strings"
)

var loginRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$`)

// ChannelFile is the channels/github.yaml `fastagent add github` writes for
// bot: a mention of @bot in an issue or pull request comment, or the label
// "agent" added to an issue, is a turn in the session — when the
// comment's (issue's) author is the repository's owner, a member or a
// collaborator.
func ChannelFile(bot string) ([]byte, error) {
	if !loginRE.MatchString(bot) {
		return nil, fmt.Errorf("bot: %q is not a GitHub login", bot)
	}
	mention := strings.TrimSuffix(bot, "[bot]")
	return []byte(`# The GitHub channel: webhooks on POST /github, answers as comments.
# Secrets stay in the environment, never here: GITHUB_WEBHOOK_SECRET, and
# GITHUB_TOKEN or GITHUB_APP_ID + GITHUB_APP_PRIVATE_KEY (or _FILE).
# Template fields: event action repo owner name number title body comment
# sender association url labels label pr (docs/github.md).
#
# authorAssociation: whose comments, issues or pull requests may start the
# agent. A rule without it accepts OWNER, MEMBER and COLLABORATOR only:
# anybody can comment on a public repository. Open a rule up by listing
# more (CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, NONE) or with
# authorAssociation: [any] (everyone).
bot: ` + bot + `
rules:
  # A new comment mentioning the bot, on an issue or a pull request.
  - event: issue_comment
    action: created
    mentions: "@` + mention + `"
    authorAssociation: [OWNER, MEMBER, COLLABORATOR]   # the comment's author
    # session: "github:{{.repo}}#{{.number}}"   (the default)
  # The label "agent" added to an issue.
  - event: issues
    label: agent
    # The issue's author (only people with triage access add labels; to let
    # them hand anybody's issue to the agent, use [any]).
    authorAssociation: [OWNER, MEMBER, COLLABORATOR]
    prompt: "Issue {{.url}} ({{.title}}), labelled by {{.sender}}:\n\n{{.body}}"
  # Review every opened pull request (uncomment):
  # - event: pull_request
  #   action: opened
  #   authorAssociation: [OWNER, MEMBER, COLLABORATOR]
  #   prompt: "Review the pull request {{.url}}: {{.title}}\n\n{{.body}}"
  #   review: true
`), nil
}

// SetupSteps are the steps printed after the channel file is written: the
// webhook (URL, secret, events) and the credentials, as a token or an App.
func SetupSteps(url string, app bool) string {
	hook := "https://<your ingress>" + Path
	if url != "" {
		hook = strings.TrimRight(url, "/") + Path
	}
	var b strings.Builder
	fmt.Fprintf(&b, "1. Make a webhook secret: openssl rand -hex 32, and set it as %s on the ingress.\n", DefaultSecretEnv)
	if app {
		b.WriteString(`2. Create a GitHub App (Settings → Developer settings → GitHub Apps → New):
   - Webhook URL: ` + hook + `, Webhook secret: the secret above.
   - Repository permissions: Issues: Read and write, Pull requests: Read and write, Metadata: Read.
   - Subscribe to events: Issue comment, Issues, Pull request.
   - Generate a private key; install the App on the repositories.
3. On the workers set GITHUB_APP_ID (the App's ID) and GITHUB_APP_PRIVATE_KEY (the PEM) or
   GITHUB_APP_PRIVATE_KEY_FILE (its path); replies use each installation's token, refreshed.
`)
	} else {
		b.WriteString(`2. In the repository (or organisation): Settings → Webhooks → Add webhook:
   - Payload URL: ` + hook + `, Content type: application/json, Secret: the secret above.
   - Events: Issue comments, Issues, Pull requests.
3. On the workers set GITHUB_TOKEN: a fine-grained token of the bot account with
   Issues and Pull requests: Read and write on the repositories.
`)
	}
	fmt.Fprintf(&b, "4. For GitHub Enterprise Server set %s=https://<host>/api/v3 on the workers.\n", APIURLEnv)
	b.WriteString("5. Start (fastagent dev, or fastagent ingress + fastagent worker) and redeliver the ping from the\n" +
		"   webhook's Recent Deliveries tab: it is answered 204.\n")
	return b.String()
}
