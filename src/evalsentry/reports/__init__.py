"""What people read: the week's Markdown and HTML reports, the bill, alerts, CI output.

Owns: the gate's tables and links (``report``), the week's Markdown report (``weekly``) and HTML
report (``html_report``), the Prefect artifacts' text (``artifacts``), the lifetime bill
(``bill``), the alert's text (``alerts``), the candidate's report (``candidate_report``),
GitHub's job summary and annotations (``ci_github``) and the report server (``serve``). The top
layer of the library: it may import every other; none imports it.
"""
