package console

import (
	"fmt"
	"unicode/utf8"
)

// The drawing's geometry, in pixels.
const (
	nodeW   = 250
	nodeH   = 58
	colGap  = 150
	rowGap  = 30
	margin  = 24
	loopOut = 70
	// labelCharW is a generous width of one character of an edge's label
	// (11px sans-serif, #graph .edge text), labelPad the room kept on each
	// side of it: columns move apart until the longest label fits between
	// the boxes.
	labelCharW = 7
	labelPad   = 12
)

// columnGap is the room between two columns: colGap, or more when an edge
// label written between them would reach under the boxes.
func columnGap(edges []*GraphEdge) int {
	gap := colGap
	for _, e := range edges {
		gap = max(gap, utf8.RuneCountInString(e.Label())*labelCharW+2*labelPad)
	}
	return gap
}

// layout places the nodes in columns by their depth along the edges
// (callers left, route destinations right) and draws each edge as a
// curve; it returns the drawing's size. Cycles are cut by bounding the
// depth by the number of nodes.
func layout(nodes []*GraphNode, edges []*GraphEdge) (width, height int) {
	byID := make(map[string]*GraphNode, len(nodes))
	for _, n := range nodes {
		n.rank = 0
		byID[n.ID] = n
	}
	for range nodes {
		changed := false
		for _, e := range edges {
			from, to := byID[e.From], byID[e.To]
			if from == nil || to == nil || from == to {
				continue
			}
			if r := from.rank + 1; r > to.rank && r < len(nodes) {
				to.rank, changed = r, true
			}
		}
		if !changed {
			break
		}
	}
	// Columns, without empty ones; rows in the nodes' (sorted) order.
	cols := map[int][]*GraphNode{}
	maxRank := 0
	for _, n := range nodes {
		cols[n.rank] = append(cols[n.rank], n)
		maxRank = max(maxRank, n.rank)
	}
	gap := columnGap(edges)
	col := 0
	for r := 0; r <= maxRank; r++ {
		if len(cols[r]) == 0 {
			continue
		}
		for i, n := range cols[r] {
			n.X, n.Y, n.W, n.H = margin+col*(nodeW+gap), margin+i*(nodeH+rowGap), nodeW, nodeH
			height = max(height, n.Y+nodeH+margin+loopOut)
		}
		col++
	}
	width = max(margin*2+col*(nodeW+gap)-gap, 2*margin)
	height = max(height, 2*margin)
	for _, e := range edges {
		from, to := byID[e.From], byID[e.To]
		if from == nil || to == nil {
			continue
		}
		var x0, y0, x1, y1, x2, y2, x3, y3 int
		if to.X > from.X {
			x0, y0 = from.X+from.W, from.Y+from.H/2
			x3, y3 = to.X, to.Y+to.H/2
			mid := (x0 + x3) / 2
			x1, y1, x2, y2 = mid, y0, mid, y3
		} else {
			// Same column or backwards: a loop under the boxes.
			x0, y0 = from.X+from.W/2, from.Y+from.H
			x3, y3 = to.X+to.W/2+12, to.Y+to.H
			x1, y1, x2, y2 = x0, y0+loopOut, x3, y3+loopOut
		}
		e.Path = fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", x0, y0, x1, y1, x2, y2, x3, y3)
		// The curve's middle (t = 1/2).
		e.LabelX, e.LabelY = (x0+3*x1+3*x2+x3)/8, (y0+3*y1+3*y2+y3)/8-4
	}
	return width, height
}
