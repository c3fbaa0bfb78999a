package main

import "testing"

// One writer makes every table: the header, a separator with each column's
// alignment, a line per row; a short row is padded with empty cells, and a
// table whose rows or alignments do not match its header is refused.
func TestTable(t *testing.T) {
	got := newTable("lr", "path", "req/s").add("direct", "1542").add("konn (TODO)").String()
	if want := "| path | req/s |\n|---|---:|\n| direct | 1542 |\n| konn (TODO) |  |\n"; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	for name, f := range map[string]func(){
		"alignments": func() { newTable("l", "a", "b") },
		"row":        func() { newTable("ll", "a", "b").add("1", "2", "3") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("a table with mismatched %s was written", name)
				}
			}()
			f()
		}()
	}
}
