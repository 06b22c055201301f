package console

// Changes is the changes page's data: the Store revisions the console saw,
// newest first, each with the objects it added, changed and removed.
type Changes struct {
	History []Change
}

func (Changes) title() string { return "Changes" }

func (c *Console) changes() Changes { return Changes{History: c.historyNewestFirst()} }
