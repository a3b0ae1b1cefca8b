"""Who may do what: key roles and restrictions, the route × role table, verified end users, SSO sessions."""
