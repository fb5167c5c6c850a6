package activities

// StoredAnswerAt is storedAnswer at a given attempt, for tests.
var StoredAnswerAt = (*Activities).storedAnswer
