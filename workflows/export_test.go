package workflows

// The state the workflows carry across continue-as-new and send one
// another is unexported (it is no caller's contract); the package's own
// tests read it under these names.
type (
	Snapshot         = snapshot
	RecentTurn       = recentTurn
	QueuedTurn       = queuedTurn
	CarriedRefusal   = carriedRefusal
	FailedReplyEntry = failedReplyEntry
	ChatState        = chatState
	ChatRoute        = chatRoute
	ChatBuffer       = chatBuffer
	BufferedLine     = bufferedLine
	SubAgentWait     = subAgentWait
	SubAgentRefusal  = decisionRefusal
	SubAgentDecision = subAgentDecision
	TurnDone         = turnDone
)

// NominalTime is nominalTime.
var NominalTime = nominalTime
