package demo

import (
	"fmt"

	"github.com/usher-vdi/usher/internal/site"
)

// app is an application that the demo publishes in several variants.
type app struct {
	slug, name, command, icon, description string
}

// folders are the demo's application folders, with how many applications
// each holds: 340 on Office Apps and 60 on Engineering Apps. A folder
// publishes its apps first as they are, then in the variants below, until
// it has its count.
var folders = []struct {
	path, slug, group string
	count             int
	apps              []app
}{
	{"Office", "office", OfficeApps, 60, []app{
		{"writer", "Writer", "/usr/bin/libreoffice --writer", "document", "Word processor for letters, reports and memos."},
		{"spreadsheets", "Spreadsheets", "/usr/bin/libreoffice --calc", "spreadsheet", "Spreadsheets, charts and pivot tables."},
		{"presentations", "Presentations", "/usr/bin/libreoffice --impress", "presentation", "Slide shows for meetings and customers."},
		{"drawing", "Drawing", "/usr/bin/libreoffice --draw", "image", "Diagrams, flowcharts and floor plans."},
		{"mail", "Mail", "/usr/bin/thunderbird", "mail", "Company e-mail."},
		{"calendar", "Calendar", "/usr/bin/thunderbird -calendar", "mail", "Meetings, rooms and shared calendars."},
		{"address-book", "Address Book", "/usr/bin/thunderbird -addressbook", "mail", "Company and personal contacts."},
		{"notes", "Notes", "/usr/bin/gnote", "document", "Quick notes that follow you from host to host."},
		{"pdf-viewer", "PDF Viewer", "/usr/bin/evince", "pdf", "Read, search and print PDF files."},
		{"team-chat", "Team Chat", "/opt/teamchat/bin/teamchat", "chat", "Chat and calls with your colleagues."},
	}},
	{"Office/Tools", "tools", OfficeApps, 40, []app{
		{"calculator", "Calculator", "/usr/bin/gnome-calculator", "calculator", "A scientific and financial calculator."},
		{"archive-manager", "Archive Manager", "/usr/bin/file-roller", "folder", "Open and create zip and tar archives."},
		{"files", "Files", "/usr/bin/nautilus --new-window", "folder", "Browse your home and team shares."},
		{"screenshot", "Screenshot", "/usr/bin/gnome-screenshot --interactive", "image", "Capture the screen or a window."},
		{"scanner", "Document Scanner", "/usr/bin/simple-scan", "image", "Scan paper documents to PDF."},
		{"dictionary", "Dictionary", "/usr/bin/gnome-dictionary", "document", "Look up words and synonyms."},
		{"character-map", "Character Map", "/usr/bin/gucharmap", "settings", "Find and copy special characters."},
		{"text-editor", "Text Editor", "/usr/bin/gedit", "document", "Edit plain text files."},
	}},
	{"Office/Templates", "templates", OfficeApps, 30, []app{
		{"letterhead", "Letterhead", "/usr/bin/libreoffice --writer /srv/templates/letterhead.ott", "document", "A letter on company letterhead."},
		{"memo", "Memo", "/usr/bin/libreoffice --writer /srv/templates/memo.ott", "document", "An internal memo."},
		{"fax-cover", "Fax Cover Sheet", "/usr/bin/libreoffice --writer /srv/templates/fax-cover.ott", "document", "A cover sheet for faxes."},
		{"invoice", "Invoice", "/usr/bin/libreoffice --calc /srv/templates/invoice.ots", "spreadsheet", "An invoice with the company's terms."},
		{"timesheet", "Timesheet", "/usr/bin/libreoffice --calc /srv/templates/timesheet.ots", "spreadsheet", "A weekly timesheet."},
		{"company-slides", "Company Slides", "/usr/bin/libreoffice --impress /srv/templates/company.otp", "presentation", "Slides in the company design."},
	}},
	{"Finance", "finance", OfficeApps, 50, []app{
		{"ledger", "General Ledger", "/opt/finance/bin/ledger", "database", "Journals, accounts and trial balances."},
		{"payables", "Accounts Payable", "/opt/finance/bin/payables", "database", "Supplier invoices and payment runs."},
		{"receivables", "Accounts Receivable", "/opt/finance/bin/receivables", "database", "Customer invoices and dunning."},
		{"expenses", "Expense Claims", "/opt/finance/bin/expenses", "spreadsheet", "Submit and approve expense claims."},
		{"budget", "Budget Planner", "/opt/finance/bin/budget", "chart", "Plan next year's budget by cost centre."},
		{"fixed-assets", "Fixed Assets", "/opt/finance/bin/assets", "database", "Asset register and depreciation."},
		{"treasury", "Treasury", "/opt/finance/bin/treasury", "chart", "Cash positions and forecasts."},
		{"tax", "Tax Returns", "/opt/finance/bin/tax", "document", "VAT and sales tax returns."},
		{"payroll", "Payroll", "/opt/finance/bin/payroll", "calculator", "Monthly payroll runs."},
		{"bank-reconciliation", "Bank Reconciliation", "/opt/finance/bin/bankrec", "spreadsheet", "Match bank statements to the ledger."},
	}},
	{"Finance/Reporting", "reporting", OfficeApps, 30, []app{
		{"month-end", "Month-End Close", "/opt/finance/bin/report --month-end", "chart", "The month-end close report pack."},
		{"cash-flow", "Cash Flow Report", "/opt/finance/bin/report --cash-flow", "chart", "Cash flow by week and by month."},
		{"variance", "Budget Variance", "/opt/finance/bin/report --variance", "chart", "Actuals against budget by cost centre."},
		{"debtor-aging", "Debtor Aging", "/opt/finance/bin/report --aging", "spreadsheet", "Open customer invoices by age."},
		{"audit-trail", "Audit Trail", "/opt/finance/bin/report --audit", "database", "Who changed what in the ledger, and when."},
		{"dashboard", "Finance Dashboard", "/usr/bin/firefox --kiosk https://finance.demo.internal/dashboard", "browser", "Key figures at a glance."},
	}},
	{"HR", "hr", OfficeApps, 30, []app{
		{"directory", "Staff Directory", "/opt/hr/bin/directory", "folder", "Find colleagues, teams and phone numbers."},
		{"leave", "Leave Requests", "/opt/hr/bin/leave", "document", "Request and approve time off."},
		{"recruiting", "Recruiting", "/opt/hr/bin/recruiting", "database", "Vacancies, applicants and interviews."},
		{"training", "Training Records", "/opt/hr/bin/training", "database", "Courses taken and certificates due."},
		{"reviews", "Performance Reviews", "/opt/hr/bin/reviews", "document", "Goals and yearly reviews."},
		{"onboarding", "Onboarding", "/opt/hr/bin/onboarding", "document", "Checklists for new starters."},
	}},
	{"Sales", "sales", OfficeApps, 40, []app{
		{"crm", "CRM", "/opt/sales/bin/crm", "database", "Customers, contacts and opportunities."},
		{"quotes", "Quotations", "/opt/sales/bin/quotes", "document", "Prepare and send quotations."},
		{"orders", "Order Entry", "/opt/sales/bin/orders", "database", "Enter and track customer orders."},
		{"forecast", "Sales Forecast", "/opt/sales/bin/forecast", "chart", "The pipeline and the quarter's forecast."},
		{"price-lists", "Price Lists", "/opt/sales/bin/pricing", "spreadsheet", "Current prices and discounts."},
		{"territories", "Territory Maps", "/opt/sales/bin/territories", "image", "Sales territories and accounts on a map."},
		{"commissions", "Commissions", "/opt/sales/bin/commissions", "calculator", "Commission statements."},
		{"support-desk", "Support Desk", "/opt/sales/bin/support", "chat", "Customer tickets and chats."},
	}},
	{"Legal", "legal", OfficeApps, 20, []app{
		{"contracts", "Contract Register", "/opt/legal/bin/contracts", "document", "Contracts, renewals and notice periods."},
		{"matters", "Matter Management", "/opt/legal/bin/matters", "database", "Legal matters and their deadlines."},
		{"archive", "Document Archive", "/opt/legal/bin/archive", "folder", "Signed originals, searchable."},
		{"compliance", "Compliance Checklist", "/opt/legal/bin/compliance", "document", "Yearly compliance attestations."},
	}},
	{"Internet", "internet", OfficeApps, 20, []app{
		{"firefox", "Firefox", "/usr/bin/firefox", "browser", "Web browser."},
		{"chromium", "Chromium", "/usr/bin/chromium", "browser", "Web browser for sites that need it."},
		{"intranet", "Intranet", "/usr/bin/firefox https://intranet.demo.internal", "browser", "Company news, policies and forms."},
		{"file-transfer", "File Transfer", "/usr/bin/filezilla", "folder", "Exchange files with partners over SFTP."},
	}},
	{"Utilities", "utilities", OfficeApps, 20, []app{
		{"terminal", "Terminal", "/usr/bin/gnome-terminal", "terminal", "A shell on the session host."},
		{"printers", "Printer Settings", "/usr/bin/system-config-printer", "settings", "Choose and set up printers."},
		{"system-monitor", "System Monitor", "/usr/bin/gnome-system-monitor", "chart", "Processes and resource use of your session."},
		{"remote-support", "Remote Support", "/usr/bin/remmina", "settings", "Let the helpdesk see your screen."},
	}},
	{"Engineering", "eng", EngineeringApps, 20, []app{
		{"code-editor", "Code Editor", "/usr/bin/codium", "document", "Edit and debug source code."},
		{"git-gui", "Git GUI", "/usr/bin/git-gui", "folder", "Commit, branch and review changes."},
		{"octave", "Octave", "/usr/bin/octave --gui", "calculator", "Numerical computing."},
		{"jupyter", "Jupyter Notebook", "/usr/bin/jupyter-notebook", "browser", "Notebooks for data analysis."},
	}},
	{"Engineering/CAD", "cad", EngineeringApps, 25, []app{
		{"freecad", "FreeCAD", "/usr/bin/freecad", "cad", "Parametric 3D modelling."},
		{"kicad", "KiCad", "/usr/bin/kicad", "cad", "Schematics and printed circuit boards."},
		{"librecad", "LibreCAD", "/usr/bin/librecad", "cad", "2D drafting."},
		{"openscad", "OpenSCAD", "/usr/bin/openscad", "cad", "Solid 3D models from scripts."},
		{"blender", "Blender", "/usr/bin/blender", "image", "3D rendering and animation."},
	}},
	{"Engineering/Simulation", "sim", EngineeringApps, 15, []app{
		{"paraview", "ParaView", "/usr/bin/paraview", "chart", "Visualise simulation results."},
		{"openfoam", "OpenFOAM", "/opt/openfoam/bin/paraFoam", "chart", "Computational fluid dynamics."},
		{"circuit-simulator", "Circuit Simulator", "/usr/bin/qucs-s", "chart", "Simulate analogue and digital circuits."},
	}},
}

// variants are the further editions of an application that the demo
// publishes once each folder's apps have been published as they are.
var variants = []struct {
	suffix, arg, description string
}{
	{"Test", "--profile=test", "Test environment: changes here do not reach production."},
	{"Legacy", "--profile=legacy", "The previous version, kept for old files."},
	{"Training", "--profile=training", "Training environment with sample data."},
	{"German", "--lang=de_DE", "German user interface."},
	{"French", "--lang=fr_FR", "French user interface."},
	{"Spanish", "--lang=es_ES", "Spanish user interface."},
	{"Italian", "--lang=it_IT", "Italian user interface."},
}

// applications returns the demo's 400 applications, named
// FOLDER-APP-NNN with NNN counting from 001.
func applications() []site.Resource {
	var out []site.Resource
	for _, f := range folders {
		for i := range f.count {
			a, v := f.apps[i%len(f.apps)], i/len(f.apps)
			r := site.Resource{
				Kind:           site.Application,
				Name:           fmt.Sprintf("%s-%s-%03d", f.slug, a.slug, len(out)+1),
				DisplayName:    a.name,
				Folder:         f.path,
				Description:    a.description,
				CommandLine:    a.command,
				Icon:           "builtin:" + a.icon,
				DeliveryGroups: []string{f.group},
			}
			if v > 0 {
				vv := variants[v-1]
				r.DisplayName += " (" + vv.suffix + ")"
				r.Description += " " + vv.description
				r.CommandLine += " " + vv.arg
			}
			out = append(out, r)
		}
	}
	return out
}
