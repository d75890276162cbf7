"""Who may call the API: authentication, the policy rules, and the per-route guards."""
