from roles.firewall.tasks import firewall

firewall()
