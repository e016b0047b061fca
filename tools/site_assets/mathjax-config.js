// MathJax 2 (from the jupyter-server-mathjax package), configured before MathJax.js loads: the
// same delimiters as Jupyter's, and only the STIX-Web fonts that the package ships (the default
// TeX fonts are not in it, so asking for them would fail), and no request for about:blank. When the first typesetting is done,
// <body data-mathjax="done"> tells the site test.
window.MathJax = {
  tex2jax: {
    inlineMath: [["$", "$"], ["\\(", "\\)"]],
    displayMath: [["$$", "$$"], ["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  TeX: { equationNumbers: { autoNumber: "AMS", useLabelIds: true } },
  "HTML-CSS": {
    availableFonts: [],
    preferredFont: null,
    webFont: "STIX-Web",
    imageFont: null,
    // MathJax 2 declares a "MathJax_Blank" font at url('about:blank') (its stand-in while a web
    // font loads); Chromium refuses that address with an error in the console. local() names
    // the same stand-in without asking for any address.
    styles: { "@font-face": { "font-family": "MathJax_Blank", src: "local('MathJax_Blank')" } },
  },
  // The hidden MathML copy for screen readers (AssistiveMML) asks for MathJax's TeX fonts, which
  // the package does not ship (a 404 for each); the menu's "Show Math As" still gives the MathML.
  menuSettings: { assistiveMML: false },
  displayAlign: "center",
  messageStyle: "none",
  AuthorInit: function () {
    MathJax.Hub.Register.StartupHook("End", function () {
      document.body.dataset.mathjax = "done";
    });
  },
};
