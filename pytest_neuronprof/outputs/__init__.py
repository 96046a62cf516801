"""What people read: the terminal tables, the JSON report, Markdown, the HTML page, GitHub
Actions annotations and step summaries. Each renders gate outcomes; none decides anything."""
