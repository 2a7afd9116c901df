from ui.instructor import instructor_page

instructor_page()
