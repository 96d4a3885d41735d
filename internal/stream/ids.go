package stream

// CompareIDs orders two stream entry ids ("<ms>-<seq>") as Redis does: -1,
// 0 or +1. Comparing them as strings is wrong once the sequence numbers
// differ in length ("5-10" < "5-9").
func CompareIDs(a, b string) int { return compareIDs(a, b) }
