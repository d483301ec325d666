package apptest

// Two operator tokens of a rotation, each of the minimum strength.
const (
	OpNew = "op-new-0123456789abcdef0123456789ab"
	OpOld = "op-old-0123456789abcdef0123456789ab"
)
