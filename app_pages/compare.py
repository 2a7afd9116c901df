from ui.compare import compare_page

compare_page()
